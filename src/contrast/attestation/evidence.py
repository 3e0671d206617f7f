"""Attestation evidence as it travels between components.

Which TEE made it, and telling SNP from TDX by the bytes, is `tee`'s; `Tee` is imported
from here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from contrast.attestation.tee import Tee

__all__ = ["Evidence", "Tee"]


@dataclass(frozen=True)
class Evidence:
    """Evidence as one TEE produced it, with what a verifier needs beside it."""

    platform: Tee
    # The 1184-byte SNP report or the TDX quote, unchanged.
    report: bytes
    # SNP: VCEK or VLEK (DER or PEM), optionally ASK/ARK and an AMD CRL. TDX: none needed.
    endorsements: tuple[bytes, ...] = ()
