"""Deterministic ECDSA key generation (c2sp.org/det-keygen).

The Coordinator's root CA key and history signing key must be the same after every restart, yet
only the seed is kept. det-keygen turns a secret into a key with FIPS 186-5 A.2.2 rejection
sampling over HMAC_DRBG-SHA256, which is what the original system uses (filippo.io/keygen). No
maintained Python library implements it; it is a dozen lines over `hmac`.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives.asymmetric import ec

MINIMUM_SECRET_SIZE = 16

_PERSONALIZATION = {
    "secp224r1": b"det ECDSA key gen P-224",
    "secp256r1": b"det ECDSA key gen P-256",
    "secp384r1": b"det ECDSA key gen P-384",
    "secp521r1": b"det ECDSA key gen P-521",
}

# Group orders (SP 800-186); `cryptography` does not expose them.
_ORDER = {
    "secp224r1": 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFF16A2E0B8F03E13DD29455C5C2A3D,
    "secp256r1": 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
    "secp384r1": int(
        "ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf"
        "581a0db248b0a77aecec196accc52973",
        16,
    ),
    "secp521r1": int(
        "01ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
        "fa51868783bf2f966b7fcc0148f709a5d03bb5c9b8899c47aebb6fb71e91386409",
        16,
    ),
}


def derive_ecdsa_key(secret: bytes, curve: ec.EllipticCurve) -> ec.EllipticCurvePrivateKey:
    """The private key det-keygen derives from `secret` on `curve`."""
    if len(secret) < MINIMUM_SECRET_SIZE:
        raise ValueError(f"det-keygen needs at least {MINIMUM_SECRET_SIZE} bytes of secret")
    personalization = _PERSONALIZATION[curve.name]
    order = _ORDER[curve.name]
    drbg = _HmacDrbg(secret + personalization)
    size = (curve.key_size + 7) // 8

    def candidate() -> int:
        value = int.from_bytes(drbg.generate(size), "big")
        # bits2int: keep the leftmost len(n) bits (only P-521 is not a whole number of bytes).
        return value >> (8 * size - order.bit_length())

    scalar = candidate()
    if curve.name == "secp256r1" and scalar >= order:
        drbg.reseed_empty()
        scalar = candidate()
    if not 0 < scalar < order:
        raise RuntimeError("det-keygen produced an out-of-range scalar (hardware fault?)")
    return ec.derive_private_key(scalar, curve)


class _HmacDrbg:
    """HMAC_DRBG-SHA256 (SP 800-90A 10.1.2) with the seed material fixed at instantiation."""

    def __init__(self, material: bytes) -> None:
        self._key = b"\x00" * 32
        self._value = b"\x01" * 32
        self._update(material)

    def _hmac(self, data: bytes) -> bytes:
        return hmac.new(self._key, data, hashlib.sha256).digest()

    def _update(self, material: bytes) -> None:
        self._key = self._hmac(self._value + b"\x00" + material)
        self._value = self._hmac(self._value)
        self._key = self._hmac(self._value + b"\x01" + material)
        self._value = self._hmac(self._value)

    def reseed_empty(self) -> None:
        """The update with no material that det-keygen step 11 performs before retrying."""
        self._key = self._hmac(self._value + b"\x00")
        self._value = self._hmac(self._value)

    def generate(self, size: int) -> bytes:
        output = b""
        while len(output) < size:
            self._value = self._hmac(self._value)
            output += self._value
        return output[:size]
