"""det-keygen (c2sp.org/det-keygen) checked step by step against the specification's text."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.seed.keygen import derive_ecdsa_key

P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
# The specification's seed that makes the first P-256 candidate overflow the order.
RETRY_SEED = bytes.fromhex("b432f9be30890480298218510559aed7")


def spec_drbg(seed: bytes, personalization: bytes) -> tuple[bytes, bytes]:
    """Steps 2–7 of the specification, written out."""
    k, v = b"\x00" * 32, b"\x01" * 32
    k = hmac.new(k, v + b"\x00" + seed + personalization, hashlib.sha256).digest()
    v = hmac.new(k, v, hashlib.sha256).digest()
    k = hmac.new(k, v + b"\x01" + seed + personalization, hashlib.sha256).digest()
    v = hmac.new(k, v, hashlib.sha256).digest()
    return k, v


def test_p384_scalar_is_the_first_48_drbg_bytes() -> None:
    seed = b"\x42" * 24
    k, v = spec_drbg(seed, b"det ECDSA key gen P-384")
    v1 = hmac.new(k, v, hashlib.sha256).digest()
    v2 = hmac.new(k, v1, hashlib.sha256).digest()
    expected = int.from_bytes((v1 + v2)[:48], "big")
    key = derive_ecdsa_key(seed, ec.SECP384R1())
    assert key.private_numbers().private_value == expected


def test_p256_retries_once_when_the_first_candidate_overflows() -> None:
    k, v = spec_drbg(RETRY_SEED, b"det ECDSA key gen P-256")
    v = hmac.new(k, v, hashlib.sha256).digest()
    assert int.from_bytes(v, "big") >= P256_ORDER  # the specification's premise
    k = hmac.new(k, v + b"\x00", hashlib.sha256).digest()
    v = hmac.new(k, v, hashlib.sha256).digest()
    v = hmac.new(k, v, hashlib.sha256).digest()
    key = derive_ecdsa_key(RETRY_SEED, ec.SECP256R1())
    assert key.private_numbers().private_value == int.from_bytes(v, "big")


def test_short_secrets_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        derive_ecdsa_key(b"x" * 15, ec.SECP384R1())
