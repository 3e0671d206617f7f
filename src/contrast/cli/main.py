"""Entry point of the `contrast` command.

Every expected failure is a `ContrastError` and becomes one line on stderr with exit code 1;
anything else is a bug and shows its traceback only with `--debug`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

from contrast import __version__
from contrast.errors import ContrastError

EXIT_FAILURE = 1
EXIT_USAGE = 2


class Command(NamedTuple):
    """A top-level command: the module under `contrast.cli` that registers it, and its help.

    `logs` is False for a command whose code never logs: it runs without the logging module
    (unless `--debug` asks for debug logs), which would cost `contrast evidence verify` a
    twentieth of its time. tests/cli/test_main.py checks that such a command loads no logging.

    A named tuple, not a dataclass: `contrast --help` then loads neither `dataclasses` nor the
    `inspect` it imports, a sixth of its time.
    """

    module: str
    help: str
    logs: bool = True


# Every command, in the order `contrast --help` lists them. A module is imported only when its
# command runs: together they pull in grpc, pydantic, the Coordinator and the policy engine,
# which cost 0.4 s that `contrast --help` or `contrast evidence verify` should not pay.
# tests/cli/test_main.py checks that each help equals the one its module registers.
COMMANDS = {
    "demo": Command(
        "demo", "run Coordinator and workloads locally on the emulated TEE, end to end"
    ),
    "generate": Command(
        "generate", "make the pods in Kubernetes YAML confidential and write the manifest"
    ),
    "set": Command("userapi", "attest the Coordinator and set the manifest"),
    "verify": Command(
        "userapi", "attest the Coordinator and write what a data owner needs to verify/"
    ),
    "recover": Command("userapi", "attest a restarted Coordinator and give it back the seed"),
    "coordinator": Command("components", "run the Coordinator (user API, mesh API, metrics)"),
    "initializer": Command(
        "components", "get this workload's mesh certificate and secret (init container)"
    ),
    "servicemesh": Command("servicemesh", "the service-mesh sidecar (Envoy)"),
    "runtime": Command(
        "release", "print the RuntimeClass and node-installer DaemonSet of a platform"
    ),
    "coordinator-resources": Command(
        "release", "print the Coordinator StatefulSet and its Services"
    ),
    "node-installer": Command(
        "nodeinstaller", "install a platform's runtime into a node's root and add it to containerd"
    ),
    "evidence": Command("evidence", "inspect attestation evidence", logs=False),
    "policy": Command("policy", "evaluate Kata agent requests against a policy"),
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser: complete for the command `argv` names, the others only by name and help.

    Without `argv`, every command is complete (for tests and documentation). The others are left
    out when nothing `argv` can make argparse print names them: a parser per command costs
    `contrast evidence verify` more than its own command's parser.
    """
    parser = _Parser(
        prog="contrast",
        description="Confidential containers on Kubernetes, proven by remote attestation.",
    )
    parser.add_argument("--version", action="version", version=f"contrast {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show debug logs and tracebacks of failures"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if argv is None:
        modules = list(dict.fromkeys(command.module for command in COMMANDS.values()))
    else:
        chosen = COMMANDS.get(_command_name(argv) or "")
        modules = [chosen.module] if chosen is not None else []
    for module in modules:
        importlib.import_module(f"contrast.cli.{module}").register(commands)
    if argv is None or _may_list_commands(argv):
        for name, command in COMMANDS.items():
            if name not in commands.choices:
                commands.add_parser(name, help=command.help)
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse's parser with `_Formatter` unless another formatter is asked for.

    argparse makes a command's parser of the class of the parser it is added to, so every
    parser under `contrast` is one of these.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, told the terminal's width instead of asking `shutil`.

    argparse makes a formatter for every argument it adds (to check the metavar) and, unless told
    the width, measures the terminal with `shutil.get_terminal_size`: loading `shutil` (and the
    bz2, lzma and zlib it imports) cost `contrast evidence verify` 4 ms, though it prints no help.
    """

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        # Two columns fewer than the terminal's, as argparse keeps of a width it measures.
        width = terminal_columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


def terminal_columns() -> int:
    """`shutil.get_terminal_size().columns` without loading shutil.

    $COLUMNS if it is a positive integer, else the width of the terminal on stdout, else 80.
    """
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        size = os.get_terminal_size(sys.__stdout__.fileno())  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):  # no stdout, closed, or not a terminal
        return _FALLBACK_COLUMNS
    return size.columns or _FALLBACK_COLUMNS


_FALLBACK_COLUMNS = 80


def _command_name(argv: Sequence[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (none takes a value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _may_list_commands(argv: Sequence[str]) -> bool:
    """Whether argparse may print the list of commands while it parses `argv`.

    It never does for a known command preceded by nothing but `--debug`: the words after the
    command are its own parser's, and the top-level usage says COMMAND, not the list. Anything
    else (`--help` or an abbreviation of it, an unknown or missing command) may list them.
    """
    name = _command_name(argv)
    if name not in COMMANDS:
        return True
    return any(word != "--debug" for word in argv[: list(argv).index(name)])


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    arguments = parser.parse_args(argv)
    if arguments.debug or COMMANDS[arguments.command].logs:
        _configure_logging(debug=arguments.debug)
    try:
        result: int = arguments.run(arguments)
    except ContrastError as error:
        if arguments.debug:
            raise
        # One line, whatever a message quoted (a parser's multi-line report, a file name).
        print(f"contrast: {' '.join(error.explain().splitlines())}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        if arguments.debug:
            raise
        print(
            f"contrast: internal error: {type(error).__name__}: {error}"
            " (run again with --debug for details)",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return result


def _configure_logging(*, debug: bool) -> None:
    # Imported here: a command that never logs does without it (see `Command.logs`).
    import logging  # noqa: PLC0415

    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


if __name__ == "__main__":
    sys.exit(main())
