"""Seed shares: RSA-OAEP-SHA256 with the label "seedshare", one per owner key."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from contrast.seed.shares import (
    SeedShareDocument,
    SeedShareError,
    load_public_key_hex,
    public_key_hex,
)

SEED = bytes(range(64))
SALT = bytes(32)


@pytest.fixture(scope="module")
def owners() -> list[rsa.RSAPrivateKey]:
    return [rsa.generate_private_key(65537, 2048) for _ in range(2)]


def test_each_owner_recovers_the_seed(owners: list[rsa.RSAPrivateKey]) -> None:
    document = SeedShareDocument.create(SEED, SALT, [key.public_key() for key in owners])
    for key in owners:
        assert document.decrypt(key) == SEED
    assert SEED not in document.to_json()


def test_the_label_is_seedshare(owners: list[rsa.RSAPrivateKey]) -> None:
    document = SeedShareDocument.create(SEED, SALT, [owners[0].public_key()])
    ciphertext = document.shares[0].encrypted_seed
    oaep = padding.OAEP(padding.MGF1(hashes.SHA256()), hashes.SHA256(), b"seedshare")
    assert owners[0].decrypt(ciphertext, oaep) == SEED
    unlabelled = padding.OAEP(padding.MGF1(hashes.SHA256()), hashes.SHA256(), None)
    with pytest.raises(ValueError, match=r"[Dd]ecryption failed"):
        owners[0].decrypt(ciphertext, unlabelled)


def test_json_round_trip(owners: list[rsa.RSAPrivateKey]) -> None:
    document = SeedShareDocument.create(SEED, SALT, [key.public_key() for key in owners])
    assert SeedShareDocument.from_json(document.to_json()) == document


def test_a_stranger_key_gets_a_clear_error(owners: list[rsa.RSAPrivateKey]) -> None:
    document = SeedShareDocument.create(SEED, SALT, [owners[0].public_key()])
    with pytest.raises(SeedShareError, match="no seed share in the document is for this key"):
        document.decrypt(owners[1])


def test_a_damaged_share_gets_a_clear_error(owners: list[rsa.RSAPrivateKey]) -> None:
    document = SeedShareDocument.create(SEED, SALT, [owners[0].public_key()])
    share = document.shares[0]
    damaged = bytearray(share.encrypted_seed)
    damaged[10] ^= 1
    broken = SeedShareDocument((type(share)(share.public_key, bytes(damaged)),), SALT)
    with pytest.raises(SeedShareError, match="damaged"):
        broken.decrypt(owners[0])


@pytest.mark.parametrize("data", [b"", b"{}", b'{"SeedShares": [{}], "Salt": ""}', b"[1]"])
def test_garbage_documents_are_refused(data: bytes) -> None:
    with pytest.raises(SeedShareError, match="not a seed share document"):
        SeedShareDocument.from_json(data)


def test_public_key_hex_round_trip(owners: list[rsa.RSAPrivateKey]) -> None:
    text = public_key_hex(owners[0].public_key())
    assert text.startswith("3082")  # PKCS#1 RSAPublicKey SEQUENCE, as the manifest holds it
    assert public_key_hex(load_public_key_hex(text)) == text
    with pytest.raises(SeedShareError):
        load_public_key_hex("zz")


def test_a_deeply_nested_document_is_refused_before_parsing() -> None:
    deep = b'{"SeedShares": ' + b"[" * 100_000 + b"]" * 100_000 + b', "Salt": ""}'
    with pytest.raises(SeedShareError, match="nests deeper than 8 levels"):
        SeedShareDocument.from_json(deep)
