"""The TDX conformance vectors and their collateral, as the tests here use them."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from contrast.attestation.certificates import parse_time
from contrast.attestation.tdx.collateral import Collateral, load_collateral
from tests.conftest import ATTESTATION_DATA, Vector, load_vectors

TDX_VECTORS = load_vectors("tdx")
VALID = [v for v in TDX_VECTORS if v.expected["expected"] == "valid"]
NEGATIVE = [v for v in TDX_VECTORS if v.expected["expected"] != "valid"]
WITH_COLLATERAL = [v for v in TDX_VECTORS if "collateral" in v.expected]
COLLATERAL_KEYS = ("tcb_info", "qe_identity", "tcb_signing_chain", "pck_crl", "root_ca_crl")


def vector(name: str) -> Vector:
    return next(v for v in TDX_VECTORS if v.path.name == name)


def valid_at(v: Vector) -> datetime:
    return parse_time(v.expected["valid_at"])


def quote_bytes(v: Vector) -> bytes:
    return v.file("quote")


def collateral_paths(v: Vector) -> list[Path]:
    """The files expected.json names; a vector's own tcb_info.json overrides the shared one."""
    named: dict[str, Any] = v.expected.get("collateral", {})
    paths = []
    for key in COLLATERAL_KEYS:
        if key in named:
            local = v.path / Path(named[key]).name
            shared = ATTESTATION_DATA / named[key]
            paths.append(local if key == "tcb_info" and local.exists() else shared)
    return paths


def collateral(v: Vector) -> Collateral | None:
    paths = collateral_paths(v)
    return load_collateral([p.read_bytes() for p in paths]) if paths else None


def expected_tcb_status(v: Vector) -> str | None:
    combined = v.expected.get("collateral", {}).get("combined_tcb_status")
    if combined is None:
        return None
    return "TcbLevelNotSupported" if combined.startswith("TCB level not supported") else combined
