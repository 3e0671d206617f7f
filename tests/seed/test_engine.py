"""Seed engine: deterministic derivations with the original's labels, and no secret in reprs."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.seed.engine import SALT_SIZE, SEED_SIZE, SeedEngine
from contrast.seed.errors import SeedError
from contrast.seed.keygen import derive_ecdsa_key

SEED = bytes(range(SEED_SIZE))
SALT = bytes(range(100, 100 + SALT_SIZE))


def rfc5869_hkdf(ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    """HKDF-SHA256 written from RFC 5869, independent of `cryptography`."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    output, block = b"", b""
    for counter in range(1, -(-length // 32) + 1):
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        output += block
    return output[:length]


def private_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def test_workload_secret_follows_the_original_labels() -> None:
    engine = SeedEngine(SEED, SALT)
    pod_state = rfc5869_hkdf(SEED, SALT, b"POD STATE SECRET", 64)
    expected = rfc5869_hkdf(pod_state, SALT, b"WORKLOAD SECRET ID: apps/v1/Deployment/x/y", 64)
    assert engine.workload_secret("apps/v1/Deployment/x/y") == expected


def test_keys_come_from_det_keygen_over_the_labelled_secrets() -> None:
    engine = SeedEngine(SEED, SALT)
    root_secret = rfc5869_hkdf(SEED, SALT, b"ROOT CA SEED", 64)
    signing_secret = rfc5869_hkdf(SEED, SALT, b"TRANSACTION SIGNING SECRET", 64)
    assert private_bytes(engine.root_ca_key) == private_bytes(
        derive_ecdsa_key(root_secret, ec.SECP384R1())
    )
    assert private_bytes(engine.transaction_signing_key) == private_bytes(
        derive_ecdsa_key(signing_secret, ec.SECP384R1())
    )
    assert isinstance(engine.root_ca_key.curve, ec.SECP384R1)


def test_same_seed_same_keys_other_seed_other_keys() -> None:
    first, again = SeedEngine(SEED, SALT), SeedEngine(SEED, SALT)
    other_seed = SeedEngine(bytes(SEED_SIZE), SALT)
    other_salt = SeedEngine(SEED, bytes(SALT_SIZE))
    assert private_bytes(first.root_ca_key) == private_bytes(again.root_ca_key)
    for other in (other_seed, other_salt):
        assert private_bytes(first.root_ca_key) != private_bytes(other.root_ca_key)
        assert first.workload_secret("a") != other.workload_secret("a")
    assert first.workload_secret("a") != first.workload_secret("b")
    assert private_bytes(first.root_ca_key) != private_bytes(first.transaction_signing_key)


def test_generated_engines_differ() -> None:
    assert SeedEngine.generate().seed != SeedEngine.generate().seed


@pytest.mark.parametrize(
    ("seed", "salt", "message"),
    [
        (SEED, SALT[:-1], "salt must be 32 bytes"),
        (SEED[:31], SALT, "seed must be at least 32 bytes"),
    ],
)
def test_wrong_sizes_are_refused(seed: bytes, salt: bytes, message: str) -> None:
    with pytest.raises(SeedError, match=message):
        SeedEngine(seed, salt)


def test_empty_workload_secret_id_is_refused() -> None:
    with pytest.raises(SeedError, match="non-empty"):
        SeedEngine(SEED, SALT).workload_secret("")


def test_repr_shows_no_secret() -> None:
    text = repr(SeedEngine(SEED, SALT))
    assert SEED.hex()[:16] not in text
    assert str(list(SEED[:8]))[1:-1] not in text
    assert "seed=" not in text
