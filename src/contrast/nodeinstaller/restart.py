"""Restarting containerd so it reads the new runtime: an effect, so the runner is passed in.

The default asks systemd over D-Bus (`busctl`, through the host's system bus socket that the
DaemonSet mounts), which needs neither the host's mount namespace nor its `systemctl`. The
original's way, `nsenter --target 1 --mount -- systemctl restart {unit}`, or anything else, can be
given as a command instead. `{unit}` in a command's arguments stands for the unit; units are tried
in order and the first that restarts wins (the target config may list several, for nodes that run
containerd under another name, such as k3s). A command without `{unit}` runs once as it is.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contrast.nodeinstaller.errors import RestartError

UNIT_PLACEHOLDER = "{unit}"
SYSTEMD_DBUS_RESTART = (
    "busctl", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
    "org.freedesktop.systemd1.Manager", "RestartUnit", "ss", UNIT_PLACEHOLDER, "replace",
)  # fmt: skip
COMMAND_TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    output: str


Runner = Callable[[Sequence[str]], CommandResult]


def run_command(argv: Sequence[str]) -> CommandResult:
    """The real runner: run `argv`, collect its output, never raise for a failing command."""
    try:
        completed = subprocess.run(  # noqa: S603 - argv comes from the operator, not a shell
            list(argv),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
    except FileNotFoundError:
        return CommandResult(127, f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, f"timed out after {COMMAND_TIMEOUT_SECONDS} s")
    return CommandResult(completed.returncode, (completed.stdout + completed.stderr).strip())


def parse_command(text: str) -> tuple[str, ...]:
    """A `--restart-command` string, split as a POSIX shell would (no shell runs it)."""
    try:
        argv = tuple(shlex.split(text))
    except ValueError as error:
        raise RestartError(f"restart command {text!r} cannot be split: {error}") from error
    if not argv:
        raise RestartError("the restart command is empty")
    return argv


def restart_containerd(
    units: Sequence[str], *, command: Sequence[str] = SYSTEMD_DBUS_RESTART, runner: Runner
) -> str | None:
    """Restart the first of `units` that restarts; the unit's name, or None for a unit-less command.

    Raises `RestartError` with every attempt's output when none succeeds.
    """
    if not any(UNIT_PLACEHOLDER in argument for argument in command):
        result = runner(command)
        if result.returncode != 0:
            raise RestartError(
                f"restart command {shlex.join(command)} failed ({result.returncode}):"
                f" {result.output}"
            )
        return None
    failures = []
    for unit in units:
        argv = [argument.replace(UNIT_PLACEHOLDER, unit) for argument in command]
        result = runner(argv)
        if result.returncode == 0:
            return unit
        failures.append(f"{unit}: {result.output or f'exit code {result.returncode}'}")
    raise RestartError(
        "containerd was not restarted: " + "; ".join(failures),
        hint="set systemd-unit-name in the target config to containerd's unit, or restart it"
        " by hand; the runtime is installed but containerd does not know it yet",
    )
