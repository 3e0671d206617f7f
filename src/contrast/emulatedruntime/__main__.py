"""`python -m contrast.emulatedruntime` / `contrast-emulated-runtime`: runc, tee-server, setup.

- `runc ARGS…`: one runc call from containerd's shim (the launcher passes create, exec, delete);
- `tee-server SANDBOX-DIR`: one pod's emulated TEE (started by `runc create` of its sandbox);
- `setup [--launcher PATH] [--public DIR]`: the node's roots (from the environment's settings),
  their public part, and the launcher for containerd's `BinaryName`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from contrast.errors import ContrastError


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    # Imported per command: the runc path must start fast.
    from contrast.emulatedruntime.node import NodeSettings  # noqa: PLC0415

    try:
        settings = NodeSettings.from_environment()
        if arguments[:1] == ["runc"]:
            from contrast.emulatedruntime.wrapper import run  # noqa: PLC0415

            return run(arguments[1:], settings)
        if arguments[:1] == ["tee-server"] and len(arguments) == 2:
            from contrast.emulatedruntime.node import Sandbox  # noqa: PLC0415
            from contrast.emulatedruntime.teeserver import serve  # noqa: PLC0415

            serve(Sandbox(Path(arguments[1])), settings)
            return 0
        return _setup(arguments, settings)
    except ContrastError as error:
        print(f"contrast-emulated-runtime: {error}", file=sys.stderr)
        return 1


def _setup(arguments: list[str], settings: object) -> int:
    import argparse  # noqa: PLC0415 (setup only: the runc path parses runc's own arguments)

    from contrast.emulatedruntime.launcher import LAUNCHER_NAME, render_launcher  # noqa: PLC0415
    from contrast.emulatedruntime.node import NodeSettings  # noqa: PLC0415
    from contrast.emulatedruntime.roots import ensure_roots, export_public  # noqa: PLC0415
    from contrast.files import write_atomically  # noqa: PLC0415

    assert isinstance(settings, NodeSettings)
    parser = argparse.ArgumentParser(prog="contrast-emulated-runtime")
    commands = parser.add_subparsers(dest="command", required=True)
    setup = commands.add_parser(
        "setup", help="create the node's roots, export them, write the launcher"
    )
    setup.add_argument("--public", type=Path, help="write the roots' certificates here")
    setup.add_argument(
        "--launcher", type=Path, help=f"write the launcher here (e.g. …/{LAUNCHER_NAME})"
    )
    parsed = parser.parse_args(arguments)
    ensure_roots(settings.roots)
    print(f"roots: {settings.roots}")
    if parsed.public is not None:
        for path in export_public(settings.roots, parsed.public):
            print(f"public: {path}")
    if parsed.launcher is not None:
        text = render_launcher(
            platform=settings.platform,
            python=sys.executable,
            runc=os.path.realpath(settings.runc),
            state=settings.state,
            roots=settings.roots,
        )
        write_atomically(parsed.launcher, text, mode=0o755)
        print(f"launcher: {parsed.launcher}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
