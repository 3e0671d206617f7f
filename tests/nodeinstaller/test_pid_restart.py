"""Restarting containerd through its supervisor's pid file (`containerd-pid-file`), for real.

The "containerd" here is a real process named so (its /proc/self/comm) that listens on a unix
socket after a moment, as containerd does once it has read its config; the supervisor is a real
process that starts it again whenever it exits and keeps its pid in a file, as runit, s6 or
OpenRC would. Nothing is mocked: the installer sends a real SIGTERM and waits for the new pid.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contrast.nodeinstaller.errors import RestartError
from contrast.nodeinstaller.install import InstallRequest, install_runtime
from contrast.nodeinstaller.pidrestart import process_state, restart_by_pid_file
from contrast.nodeinstaller.targetconfig import TargetConfig
from contrast.platforms import by_name
from tests.nodeinstaller.conftest import RecordingRunner

# A stand-in containerd: named `containerd`, listening on argv[1] after 0.3 s (as containerd
# does once it has read its config), exiting on SIGTERM.
CONTAINERD = """
import os, socket, sys, time
with open("/proc/self/comm", "w") as comm:
    comm.write("containerd")
time.sleep(0.3)
path = sys.argv[1]
if os.path.exists(path):
    os.unlink(path)
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
while True:
    time.sleep(1000)
"""
# The supervisor: starts it, writes its pid atomically, starts it again when it exits; stops it
# and itself on SIGTERM. With `once`, it never restarts (a node whose supervisor is not there).
SUPERVISOR = """
import os, signal, subprocess, sys
pid_file, socket_path, mode, child_code = sys.argv[1:5]
state = {"stop": False, "child": None}
def stop(*_):
    state["stop"] = True
    state["child"].terminate()
signal.signal(signal.SIGTERM, stop)
while not state["stop"]:
    state["child"] = subprocess.Popen([sys.executable, "-c", child_code, socket_path])
    with open(pid_file + ".new", "w") as file:
        file.write(f"{state['child'].pid}\\n")
    os.replace(pid_file + ".new", pid_file)
    state["child"].wait()
    if mode == "once":
        signal.pause()
"""


def supervised(pid_file: Path, socket_path: Path, mode: str) -> subprocess.Popen[bytes]:
    """The supervisor, once its containerd's pid is in `pid_file` and its socket answers."""
    process = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(pid_file), str(socket_path), mode, CONTAINERD]
    )
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and socket_path.exists()):
        assert time.monotonic() < deadline, "the supervisor did not start its containerd"
        time.sleep(0.05)
    return process


@pytest.fixture
def stopped() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.terminate()
        process.wait(timeout=10)


def read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as client:
        try:
            client.connect(str(path))
        except OSError:
            return False
    return True


def alive(pid: int) -> bool:
    state = process_state(pid)
    return state is not None and state[1] not in ("Z", "X")


def test_sigterm_and_the_supervisors_next_containerd(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    pid_file, socket_path = tmp_path / "containerd.pid", tmp_path / "containerd.sock"
    stopped.append(supervised(pid_file, socket_path, "always"))
    old = int(pid_file.read_text())
    began = time.monotonic()
    new = restart_by_pid_file(
        lambda: read(pid_file), shown=str(pid_file), socket_answers=lambda: answers(socket_path)
    )
    print(f"restarted in {time.monotonic() - began:.2f} s: {old} -> {new}")
    assert new != old
    assert new == int(pid_file.read_text())
    assert process_state(new) is not None
    assert process_state(new)[0] == "containerd"  # type: ignore[index]
    assert answers(socket_path)
    assert not alive(old)


def test_no_new_containerd_is_a_restart_error_after_the_timeout(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    pid_file, socket_path = tmp_path / "containerd.pid", tmp_path / "containerd.sock"
    stopped.append(supervised(pid_file, socket_path, "once"))
    old = int(pid_file.read_text())
    began = time.monotonic()
    with pytest.raises(RestartError, match="no new containerd was up within 1 s") as raised:
        restart_by_pid_file(lambda: read(pid_file), shown=str(pid_file), timeout=1.0)
    assert 1.0 <= time.monotonic() - began < 5
    assert "still names the old pid" in str(raised.value)
    assert not alive(old)  # it was stopped; nothing started another


def test_a_stale_pid_file_signals_nothing(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = tmp_path / "containerd.pid"
        pid_file.write_text(f"{other.pid}\n")
        with pytest.raises(RestartError, match="is 'sleep', not containerd"):
            restart_by_pid_file(lambda: read(pid_file), shown=str(pid_file), timeout=1.0)
        assert other.poll() is None  # not signalled
        pid_file.write_text("not a pid\n")
        with pytest.raises(RestartError, match="holds no pid"):
            restart_by_pid_file(lambda: read(pid_file), shown=str(pid_file), timeout=1.0)
        other.kill()
        other.wait()
        pid_file.write_text(f"{other.pid}\n")
        with pytest.raises(RestartError, match="does not run"):
            restart_by_pid_file(lambda: read(pid_file), shown=str(pid_file), timeout=1.0)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


def test_the_installer_restarts_through_the_target_configs_pid_file(
    tmp_path: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    """install_runtime with `containerd-pid-file`: the socket it waits for is the one the
    containerd config names ([grpc] address), inside the host root; systemd is never asked."""
    host = tmp_path / "host"
    state = host / "run/containerd"
    state.mkdir(parents=True)
    (host / "etc/containerd").mkdir(parents=True)
    (host / "etc/containerd/config.toml").write_text(
        'version = 2\n\n[grpc]\n  address = "/run/containerd/containerd.sock"\n'
    )
    stopped.append(supervised(state / "containerd.pid", state / "containerd.sock", "always"))
    old = int((state / "containerd.pid").read_text())
    target = TargetConfig.model_validate(
        {"emulated-python": sys.executable, "containerd-pid-file": "/run/containerd/containerd.pid"}
    )
    runner = RecordingRunner()
    report = install_runtime(
        InstallRequest(host, by_name("emulated-snp"), target, tmp_path / "none"), runner=runner
    )
    assert report.config_changed
    assert report.restarted
    assert runner.calls == []  # no busctl, no systemctl
    new = int((state / "containerd.pid").read_text())
    assert new != old
    assert alive(new)
    assert not alive(old)
    again = install_runtime(
        InstallRequest(host, by_name("emulated-snp"), target, tmp_path / "none"), runner=runner
    )
    assert (again.config_changed, again.restarted) == (False, False)
    assert int((state / "containerd.pid").read_text()) == new
