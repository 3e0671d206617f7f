"""The 64 bytes of REPORT_DATA every guest interface takes.

Exactly 64 bytes are required, never padded here: the kernel refuses anything else on the
configfs-tsm path (sev-guest and tdx-guest both return EINVAL for another `inblob` length), and
silently zero-padding a shorter value would let two different inputs produce the same evidence.
Contrast binds keys with SHA-512(public key ‖ nonce), which is 64 bytes by construction.
"""

from __future__ import annotations

from contrast.attestation.errors import AttestationPackageError

REPORT_DATA_SIZE = 64


def require_report_data(report_data: bytes) -> bytes:
    """`report_data` as bytes if it is exactly 64 bytes long, else AttestationPackageError."""
    if len(report_data) != REPORT_DATA_SIZE:
        raise AttestationPackageError(
            f"report data must be exactly {REPORT_DATA_SIZE} bytes, got {len(report_data)}",
            hint="hash what you want to bind (SHA-512 gives 64 bytes) or pad it explicitly",
        )
    return bytes(report_data)
