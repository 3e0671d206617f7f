"""runc's command line as containerd's runc shim (go-runc) writes it.

`runc [global options] <command> [command options] <container-id>`; the global options the shim
uses are `--root`, `--log`, `--log-format`, `--systemd-cgroup`, `--debug`, `--criu` and
`--rootless`. Only what the runtime needs is read: the command, its container id, the bundle of
`create`, the process file of `exec`, and the log file, where runc reports errors to containerd.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Global options followed by a value (runc's urfave/cli flags; `--flag=value` is also accepted).
_GLOBAL_WITH_VALUE = frozenset({"--root", "--log", "--log-format", "--criu", "--rootless"})
# Options of the commands handled here that take a value.
_COMMAND_WITH_VALUE = {
    "create": frozenset({"--bundle", "-b", "--console-socket", "--pid-file", "--preserve-fds"}),
    "exec": frozenset(
        {
            "--console-socket",
            "--pid-file",
            "--process",
            "-p",
            "--cwd",
            "--env",
            "-e",
            "--user",
            "-u",
            "--additional-gids",
            "-g",
            "--cap",
            "-c",
            "--apparmor",
            "--process-label",
            "--preserve-fds",
            "--cgroup",
        }
    ),
    "delete": frozenset(),
    "update": frozenset(
        {
            "--resources",
            "-r",
            "--blkio-weight",
            "--cpu-period",
            "--cpu-quota",
            "--cpu-share",
            "--cpu-rt-period",
            "--cpu-rt-runtime",
            "--cpuset-cpus",
            "--cpuset-mems",
            "--memory",
            "--memory-reservation",
            "--memory-swap",
            "--pids-limit",
            "--l3-cache-schema",
            "--mem-bw-schema",
        }
    ),
    "pause": frozenset(),
    "resume": frozenset(),
}
HANDLED = frozenset(_COMMAND_WITH_VALUE)


@dataclass(frozen=True)
class RuncCall:
    command: str  # "" when none was found (runc --version, runc --help)
    container_id: str
    options: dict[str, str]  # command options with values, by their long name as written
    log: str | None
    log_format: str

    def option(self, *names: str) -> str | None:
        for name in names:
            if name in self.options:
                return self.options[name]
        return None


def parse(argv: Sequence[str]) -> RuncCall:
    """The call in `argv` (without the program name)."""
    globals_: dict[str, str] = {}
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        name, value, index = _option(argv, index, _GLOBAL_WITH_VALUE)
        globals_[name] = value
    command = argv[index] if index < len(argv) else ""
    options: dict[str, str] = {}
    positional: list[str] = []
    with_value = _COMMAND_WITH_VALUE.get(command, frozenset())
    index += 1
    while index < len(argv):
        if argv[index] == "--":
            positional.extend(argv[index + 1 :])
            break
        if argv[index].startswith("-"):
            name, value, index = _option(argv, index, with_value)
            options[name] = value
        else:
            positional.append(argv[index])
            index += 1
    return RuncCall(
        command=command,
        container_id=positional[0] if positional else "",
        options=options,
        log=globals_.get("--log"),
        log_format=globals_.get("--log-format", "text"),
    )


def _option(argv: Sequence[str], index: int, with_value: frozenset[str]) -> tuple[str, str, int]:
    argument = argv[index]
    if "=" in argument:
        name, value = argument.split("=", 1)
        return name, value, index + 1
    if argument in with_value and index + 1 < len(argv):
        return argument, argv[index + 1], index + 2
    return argument, "", index + 1
