"""Entry point of the `contrast` command.

Every expected failure is a `ContrastError` and becomes one line on stderr with exit code 1;
anything else is a bug and shows its traceback only with `--debug`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from contrast import __version__
from contrast.cli import (
    components,
    demo,
    evidence,
    generate,
    nodeinstaller,
    policy,
    release,
    servicemesh,
    userapi,
)
from contrast.errors import ContrastError

EXIT_FAILURE = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="contrast",
        description="Confidential containers on Kubernetes, proven by remote attestation.",
    )
    parser.add_argument("--version", action="version", version=f"contrast {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show debug logs and tracebacks of failures"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo.register(commands)
    generate.register(commands)
    userapi.register(commands)
    components.register(commands)
    servicemesh.register(commands)
    release.register(commands)
    nodeinstaller.register(commands)
    evidence.register(commands)
    policy.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
