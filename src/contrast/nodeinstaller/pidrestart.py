"""Restarting a containerd that runs under a supervisor other than systemd (runit, s6, OpenRC).

Such a supervisor keeps containerd's pid in a file and starts containerd again when it exits. The
installer (hostPID in the DaemonSet, so node pids are its own) reads that pid, checks that it is a
running `containerd` (a stale file must never make it signal another process), sends SIGTERM and
waits until the file names another pid whose process is a running `containerd` and, when the
socket is known, until that socket accepts a connection: only then has the new containerd read the
config. A supervisor that never restarts it is a `RestartError` after the timeout, never a hang.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from contrast.nodeinstaller.errors import RestartError

PROCESS_NAME = "containerd"
TIMEOUT_SECONDS = 60.0
POLL_SECONDS = 0.1


def process_state(pid: int, proc: Path = Path("/proc")) -> tuple[str, str] | None:
    """(name, state) of a process from /proc/PID/stat; None when there is none."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    name, _, rest = text.partition(" (")[2].rpartition(") ")
    fields = rest.split()
    return (name, fields[0]) if fields else None


def _running(pid: int, proc: Path) -> bool:
    """Whether PID is a live `containerd`: a zombie or a dead pid is not."""
    state = process_state(pid, proc)
    return state is not None and state[0] == PROCESS_NAME and state[1] not in ("Z", "X")


def parse_pid(text: bytes | None) -> int | None:
    """The pid a pid file holds (one decimal number, whitespace around it allowed)."""
    if text is None:
        return None
    try:
        pid = int(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return pid if pid > 1 else None


def restart_by_pid_file(
    read_pid_file: Callable[[], bytes | None],
    *,
    shown: str,
    socket_answers: Callable[[], bool] | None = None,
    timeout: float = TIMEOUT_SECONDS,
    proc: Path = Path("/proc"),
) -> int:
    """SIGTERM the containerd the pid file names and wait for its successor; the new pid.

    `read_pid_file` returns the file's bytes (None: no file), `shown` is its node path for
    messages, `socket_answers` tells whether containerd's socket accepts a connection.
    """
    old = parse_pid(read_pid_file())
    if old is None:
        raise RestartError(
            f"containerd's pid file {shown} holds no pid",
            hint="containerd-pid-file in the target config must name the file its supervisor"
            " writes",
        )
    state = process_state(old, proc)
    if state is None or state[1] in ("Z", "X"):
        raise RestartError(f"pid {old} of {shown} does not run: containerd is not up")
    if state[0] != PROCESS_NAME:
        raise RestartError(
            f"pid {old} of {shown} is {state[0]!r}, not {PROCESS_NAME}: the file is stale",
            hint="nothing was signalled; restart containerd by hand to use the runtime",
        )
    try:
        os.kill(old, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it exited just now; its supervisor starts the next one all the same
    except PermissionError as error:
        raise RestartError(f"cannot signal containerd (pid {old}): {error}") from None
    deadline = time.monotonic() + timeout
    new = None
    while time.monotonic() < deadline:
        new = parse_pid(read_pid_file())
        if (
            new is not None
            and new != old
            and _running(new, proc)
            and (socket_answers is None or socket_answers())
        ):
            return new
        time.sleep(POLL_SECONDS)
    if new is None:
        now = "holds no pid"
    elif new == old:
        now = "still names the old pid"
    else:
        now = f"names pid {new}, not yet up"
    raise RestartError(
        f"containerd (pid {old}) was stopped, but no new containerd was up within {timeout:.0f} s"
        f" ({shown} {now})",
        hint="containerd-pid-file expects a supervisor that starts containerd again when it exits;"
        " the runtime is installed, start containerd to use it",
    )
