"""Vault's ciphertext text form and the request bodies: what is accepted, and what is refused."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.coordinator.transit.cipher import LAST_VERSION, Ciphertext, TransitKey
from contrast.coordinator.transit.errors import BadRequest
from contrast.coordinator.transit.requests import parse_decrypt, parse_encrypt
from contrast.seed.engine import SeedEngine

SEED = SeedEngine(bytes(range(64)), bytes(32))


@given(
    st.integers(1, LAST_VERSION),
    st.binary(min_size=12, max_size=12),
    st.binary(min_size=16, max_size=200),
)
def test_ciphertext_text_round_trips(version: int, nonce: bytes, sealed: bytes) -> None:
    ciphertext = Ciphertext(version, nonce, sealed)
    assert Ciphertext.from_text(ciphertext.to_text()) == ciphertext


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("vault:v1", "not of the form"),
        ("bao:v1:AAAA", "not of the form"),
        ("vault:1:" + "A" * 40, "versions"),
        ("vault:v0:" + "A" * 40, "versions start at 1"),
        ("vault:v01:" + "A" * 40, "versions"),
        ("vault:v-1:" + "A" * 40, "versions"),
        (f"vault:v{LAST_VERSION + 1}:" + "A" * 40, "out of range"),
        ("vault:v1:not base64!", "not base64"),
        ("vault:v1:" + base64.b64encode(bytes(27)).decode(), "too short"),
    ],
)
def test_malformed_ciphertexts_are_refused(text: str, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        Ciphertext.from_text(text)


def test_keys_differ_by_name_and_version_and_never_show_in_repr() -> None:
    one = TransitKey.derive(SEED, "vault", 1)
    assert one.key == SEED.workload_secret("1_vault")[:32]
    assert one.key != TransitKey.derive(SEED, "vault", 2).key
    assert one.key != TransitKey.derive(SEED, "vault2", 1).key
    assert one.key.hex() not in repr(one)
    assert TransitKey.derive(SEED, "vault", 1).key == one.key  # the same seed, the same key


def test_a_ciphertext_opens_only_with_its_key_and_associated_data() -> None:
    key = TransitKey.derive(SEED, "vault", 1)
    sealed = key.encrypt(b"root key", b"aad")
    assert key.decrypt(sealed, b"aad") == b"root key"
    with pytest.raises(BadRequest, match="authentication failed"):
        key.decrypt(sealed, None)
    with pytest.raises(BadRequest, match="authentication failed"):
        TransitKey.derive(SEED, "other", 1).decrypt(sealed, b"aad")
    flipped = Ciphertext(1, sealed.nonce, bytes([sealed.sealed[0] ^ 1]) + sealed.sealed[1:])
    with pytest.raises(BadRequest, match="authentication failed"):
        key.decrypt(flipped, b"aad")


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_encrypt_request_fields() -> None:
    request = parse_encrypt(body(plaintext=base64.b64encode(b"x").decode()))
    assert (request.plaintext, request.key_version, request.associated_data) == (b"x", 1, None)
    # Vault's 0 is "the latest", a numeric string is taken as Vault's framework takes it, and a
    # null field is no field.
    assert parse_encrypt(body(plaintext="", key_version=0)).key_version == 1
    assert parse_encrypt(body(plaintext="", key_version="7")).key_version == 7
    assert parse_encrypt(body(plaintext="", context=None)).key_version == 1


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[]", "not a JSON object"),
        (b"{", "not JSON"),
        (b"\xff", "not JSON"),
        (body(), "missing plaintext"),
        (body(plaintext=5), "base64 string"),
        (body(plaintext="", key_version=True), "whole number"),
        (body(plaintext="", key_version=1.5), "whole number"),
        (body(plaintext="", key_version=-1), "out of range"),
        (body(plaintext="", key_version=2**32), "out of range"),
        (body(plaintext="", nonce="AAAA"), "'nonce' is not supported"),
        (body(plaintext="", convergent_encryption=True), "'convergent_encryption' is not"),
        (body(plaintext="", associated_data="%%"), "associated_data is not valid base64"),
    ],
)
def test_malformed_encrypt_requests_are_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        parse_encrypt(raw)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (body(), "missing ciphertext"),
        (body(ciphertext=""), "missing ciphertext"),
        (body(ciphertext=["vault:v1:AAAA"]), "missing ciphertext"),
        (body(ciphertext="vault:v1:AAAA", batch_input=[]), "'batch_input' is not supported"),
        (body(ciphertext="vault:v1:AAAA", key_version=1), "'key_version' is not supported"),
    ],
)
def test_malformed_decrypt_requests_are_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        parse_decrypt(raw)
