"""The seams between the Coordinator and the attestation package.

An `Issuer` produces evidence for some report data inside (or emulating) a TEE; an
`EvidenceVerifier` checks evidence against reference values and says which policy the peer runs.
The Coordinator, Initializer and CLI depend on these two protocols only, so the same code runs on
real hardware and on the emulated platform.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from contrast.attestation.evidence import Evidence, Tee


@dataclass(frozen=True)
class AttestedPeer:
    """What verified evidence tells about its sender."""

    platform: Tee
    # SNP HOST_DATA, or the first 32 bytes of TDX MRCONFIGID: the hash of the peer's policy.
    policy_hash: bytes
    claims: Mapping[str, Any]


class Issuer(Protocol):
    def issue(self, report_data: bytes) -> Evidence:
        """Evidence from this TEE carrying `report_data` (64 bytes)."""


class EvidenceVerifier(Protocol):
    def verify(self, evidence: Evidence, *, report_data: bytes, now: datetime) -> AttestedPeer:
        """Accept evidence that is authentic, meets the reference values and carries
        `report_data`; raise an `AttestationError` otherwise."""
