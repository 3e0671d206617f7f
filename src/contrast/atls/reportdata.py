"""What a TEE signs when it vouches for a key: SHA-512(PKIX DER of the public key ‖ nonce).

The construction is the original's (`internal/attestation/reportdata`). The 64 bytes fill an SNP
REPORT_DATA or TDX REPORTDATA exactly. The nonce comes from the verifier, so evidence is fresh;
the key is hashed in, so evidence for one key cannot vouch for another.
"""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

NONCE_SIZE = 32


def public_key_der(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def report_data(public_key: bytes, nonce: bytes) -> bytes:
    """The report data binding `public_key` (PKIX DER) to `nonce`."""
    return hashlib.sha512(public_key + nonce).digest()
