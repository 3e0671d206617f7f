"""The node's emulated roots of trust: created once, private keys root-only, public part exported.

The keys sign every pod's reports, so they live in a directory only root can enter, which no pod
ever mounts. Their public part (the emulated ARK/ASK/ASVK and the TDX root and TCB signing
certificates, in the layout `attestation.emulated.*.load_roots` reads) is what a user gives
`generate --reference-values emulated-…`, as they would take AMD's or Intel's roots.
"""

from __future__ import annotations

import os
from pathlib import Path

from contrast.attestation.emulated.snp import EmulatedSnp, load_roots
from contrast.attestation.emulated.tdx import EmulatedTdx
from contrast.attestation.emulated.tdx import load_roots as load_tdx_roots
from contrast.emulatedruntime.node import ROOTS_MODE, EmulatedRuntimeError
from contrast.files import write_atomically

# Files below the roots directory that hold no secret (certificates only).
PUBLIC_FILES = (
    "snp/milan/ark.pem",
    "snp/milan/ask.pem",
    "snp/milan/asvk.pem",
    "tdx/chain.pem",
    "tdx/tcb_signing.pem",
)


def ensure_roots(roots: Path) -> None:
    """Create the emulated SNP and TDX hierarchies in `roots` (kept if present), root-only."""
    roots.mkdir(parents=True, exist_ok=True, mode=ROOTS_MODE)
    os.chmod(roots, ROOTS_MODE)
    EmulatedSnp(roots)
    EmulatedTdx(roots).roots  # noqa: B018 (loading creates the hierarchy)
    if load_roots(roots) is None or load_tdx_roots(roots) is None:
        raise EmulatedRuntimeError(f"the emulated roots in {roots} are incomplete")


def export_public(roots: Path, destination: Path) -> list[Path]:
    """Copy the certificates (never a key) of `roots` to `destination`; the paths written."""
    written = []
    for relative in PUBLIC_FILES:
        source = roots / relative
        if not source.is_file():
            raise EmulatedRuntimeError(f"{source} is missing", hint="run setup first")
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, source.read_bytes(), mode=0o644)
        written.append(target)
    return written
