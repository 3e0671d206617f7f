"""Entry point of the `contrast` command.

Every expected failure is a `ContrastError` and becomes one line on stderr with exit code 1;
anything else is a bug and shows its traceback only with `--debug`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from contrast import __version__
from contrast.errors import ContrastError

EXIT_FAILURE = 1
EXIT_USAGE = 2


@dataclass(frozen=True)
class Command:
    """A top-level command: the module under `contrast.cli` that registers it, and its help."""

    module: str
    help: str


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
    "evidence": Command("evidence", "inspect attestation evidence"),
    "policy": Command("policy", "evaluate Kata agent requests against a policy"),
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser: complete for the command `argv` names, the others only by name and help.

    Without `argv`, every command is complete (for tests and documentation).
    """
    parser = argparse.ArgumentParser(
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
    for name, command in COMMANDS.items():
        if name not in commands.choices:
            commands.add_parser(name, help=command.help)
    return parser


def _command_name(argv: Sequence[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (none takes a value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    arguments = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if arguments.debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
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


if __name__ == "__main__":
    sys.exit(main())
