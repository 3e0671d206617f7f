"""The program containerd runs as runc for the emulated runtime (the shim's `BinaryName`).

A POSIX shell script: containerd's runc shim calls runc for every `state`, `start`, `kill`,
`ps`, `events`, … of every container, so only the calls that are Kata agent requests the
policy may refuse (`create`, `exec`, `delete`, `update`, `pause`, `resume`) start Python; every
other call (StartContainer, SignalProcess, WaitProcess, StatsContainer: allowed by every
policy) is `exec runc` after one `case` per argument.
The script carries the node's settings (platform, real runc, roots and state directories) so the
runtime reads no configuration file of its own.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from contrast.emulatedruntime.node import PLATFORM_ENV, ROOTS_ENV, RUNC_ENV, STATE_ENV

LAUNCHER_NAME = "contrast-emulated-runc"

_TEMPLATE = """\
#!/bin/sh
# The emulated confidential runtime of Contrast ({platform}): runc for containerd's runc shim.
# Pod creation, exec and deletion are checked against the pod's policy by Python; the rest is runc.
# For development and tests only: it emulates no memory encryption, measured boot or guest kernel.
export {platform_env}={platform_q}
export {runc_env}={runc_q}
export {state_env}={state_q}
export {roots_env}={roots_q}
value=
for argument do
    if [ -n "$value" ]; then value=; continue; fi
    case "$argument" in
        --root|--log|--log-format|--criu|--rootless) value=1 ;;
        -*) ;;
        create|exec|delete|update|pause|resume)
            exec {python_q} -m contrast.emulatedruntime runc "$@" ;;
        *) break ;;
    esac
done
exec {runc_q} "$@"
"""


def render_launcher(*, platform: str, python: str, runc: str, state: Path, roots: Path) -> bytes:
    """The launcher script for these settings."""
    return _TEMPLATE.format(
        platform=platform,
        platform_env=PLATFORM_ENV,
        runc_env=RUNC_ENV,
        state_env=STATE_ENV,
        roots_env=ROOTS_ENV,
        platform_q=shlex.quote(platform),
        runc_q=shlex.quote(runc),
        state_q=shlex.quote(str(state)),
        roots_q=shlex.quote(str(roots)),
        python_q=shlex.quote(python),
    ).encode()
