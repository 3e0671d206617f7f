"""Which TEE produced a piece of evidence: SNP or TDX, told apart by the evidence's bytes.

Apart from `evidence` (evidence as it travels between components) so that `contrast evidence
verify`, which needs only this, does not also make the `Evidence` dataclass at every start.
"""

from __future__ import annotations

from enum import StrEnum

from contrast.attestation.errors import MalformedEvidence, Reason

SNP_REPORT_SIZE = 0x4A0
TDX_TEE_TYPE = 0x81


class Tee(StrEnum):
    """The TEE a piece of evidence, or a platform, is made of: the one enum for both.

    Here rather than in `contrast.platforms` because attestation sits below platforms: the
    platforms table imports it, attestation never imports the platforms.
    """

    SNP = "snp"
    TDX = "tdx"


def platform_named(name: str) -> Tee:
    """The TEE an evidence message names (`Evidence.Platform` on the wire).

    A name that is no TEE makes the evidence malformed, refused like any other malformed
    evidence (callers catch `AttestationError`); the name is cut short, since the peer chose it.
    """
    try:
        return Tee(name)
    except ValueError:
        raise MalformedEvidence(
            Reason.MALFORMED_REPORT, f"unknown evidence platform {name[:40]!r}"
        ) from None


def detect_platform(data: bytes) -> Tee:
    """Tell an SNP report from a TDX quote by their fixed headers."""
    is_quote_version = len(data) >= 8 and int.from_bytes(data[0:2], "little") in (4, 5)
    if is_quote_version and int.from_bytes(data[4:8], "little") == TDX_TEE_TYPE:
        return Tee.TDX
    if len(data) == SNP_REPORT_SIZE and int.from_bytes(data[0:4], "little") in range(2, 6):
        return Tee.SNP
    raise MalformedEvidence(
        Reason.MALFORMED_REPORT,
        f"cannot tell what kind of evidence this is ({len(data)} bytes):"
        " neither a 1184-byte SEV-SNP report nor a TDX quote v4/v5",
        hint="pass --format snp or --format tdx",
    )
