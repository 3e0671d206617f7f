"""Sandboxes whose shim is gone without a `delete`: reaped, and only those (`reaper`).

Real TEE servers, started as the runtime starts them (`teeserver.start`), on sandboxes made as
`runc create` makes them; their owners are real processes that the test ends or keeps. No
containerd here: test_runtime kills a real shim and lets the next sandbox's create reap.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from contrast.emulatedruntime import reaper, teeserver
from contrast.emulatedruntime.node import (
    PLATFORM_ENV,
    ROOTS_ENV,
    STATE_ENV,
    NodeSettings,
    NodeState,
    Owner,
    Sandbox,
)
from contrast.policy import initdata
from tests.emulatedruntime.node import stop_servers

TOML = initdata.Initdata({"policy.rego": "package agent_policy\n"}).to_toml()


def _running(pid: int) -> bool:
    return Owner.of(pid) is not None


def _wait_ended(pid: int) -> None:
    deadline = time.monotonic() + 10
    while _running(pid):
        assert time.monotonic() < deadline, f"{pid} still runs"
        time.sleep(0.02)


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NodeSettings]:
    # The TEE server reads its settings from the environment, as under the launcher.
    settings = NodeSettings("emulated-snp", "runc", tmp_path / "run", tmp_path / "roots")
    monkeypatch.setenv(PLATFORM_ENV, settings.platform)
    monkeypatch.setenv(STATE_ENV, str(settings.state))
    monkeypatch.setenv(ROOTS_ENV, str(settings.roots))
    yield settings
    stop_servers(NodeState(settings.state))  # whatever a failed test left running


@pytest.fixture
def owners() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def _owner(owners: list[subprocess.Popen[bytes]]) -> tuple[subprocess.Popen[bytes], Owner]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    owners.append(process)
    owner = Owner.of(process.pid)
    assert owner is not None
    return process, owner


def _server(sandbox: Sandbox) -> int:
    pid = sandbox.server_pid()
    assert pid is not None, f"no TEE server serves {sandbox.id}"
    return pid


def test_a_sandbox_whose_owner_is_gone_is_reaped_and_a_live_one_is_left(
    settings: NodeSettings, owners: list[subprocess.Popen[bytes]]
) -> None:
    node = NodeState(settings.state)
    dead_process, dead_owner = _owner(owners)
    _, live_owner = _owner(owners)
    orphan = node.new_sandbox("a" * 64, TOML, dead_owner)
    live = node.new_sandbox("b" * 64, TOML, live_owner)
    # An older runtime's sandbox: no owner recorded, so nothing proves it orphaned.
    legacy = node.new_sandbox("c" * 64, TOML, live_owner)
    legacy.owner_file.unlink()
    for sandbox in (orphan, live, legacy):
        teeserver.start(sandbox, settings)
    node.record_container("a" * 64, orphan.id)
    node.record_container("f" * 64, orphan.id)  # its app container
    node.record_container("b" * 64, live.id)
    orphan_server, live_server, legacy_server = map(_server, (orphan, live, legacy))

    assert reaper.reap(node) == []  # every owner runs (or is not recorded): nothing reaped

    # The owner's pid given to another process since, and a record of the boot before: not it.
    reused = node.new_sandbox("d" * 64, TOML, replace(live_owner, start=live_owner.start - 1))
    rebooted = node.new_sandbox("e" * 64, TOML, replace(live_owner, boot="0" * 36))
    dead_process.kill()
    dead_process.wait()
    assert _running(orphan_server)  # the shim's end alone does not end its TEE: the bug
    assert sorted(reaper.reap(node, keep=None)) == [orphan.id, reused.id, rebooted.id]

    _wait_ended(orphan_server)
    assert not orphan.directory.exists()
    assert not reused.directory.exists()
    assert not rebooted.directory.exists()
    assert node.sandbox_of("a" * 64) is None
    assert node.sandbox_of("f" * 64) is None
    # The live sandbox and the one without a record keep their server, directory and records.
    assert live.server_pid() == live_server
    assert legacy.server_pid() == legacy_server
    assert live.initdata() == TOML
    assert legacy.initdata() == TOML
    assert node.sandbox_of("b" * 64) == live


def test_the_sandbox_being_created_is_kept(
    settings: NodeSettings, owners: list[subprocess.Popen[bytes]]
) -> None:
    node = NodeState(settings.state)
    process, owner = _owner(owners)
    sandbox = node.new_sandbox("a" * 64, TOML, owner)
    process.kill()
    process.wait()
    assert reaper.reap(node, keep=sandbox.id) == []
    assert sandbox.exists()
    assert reaper.reap(node) == [sandbox.id]


def test_a_tee_server_that_ignores_sigterm_is_killed(
    settings: NodeSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop ends the server whatever it does with SIGTERM: none outlives its sandbox."""
    node = NodeState(settings.state)
    owner = Owner.of(1)
    assert owner is not None
    sandbox = node.new_sandbox("a" * 64, TOML, owner)
    # A process that names the sandbox as a server does and ignores SIGTERM.
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
         "open('ready', 'w').close(); time.sleep(600)", "tee-server", str(sandbox.directory)],
        cwd=tmp_path,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    sandbox.server_pid_file.write_text(str(stubborn.pid))
    monkeypatch.setattr(teeserver, "STOP_TIMEOUT", 0.5)
    teeserver.stop(sandbox)
    assert stubborn.wait(timeout=5) == -9
