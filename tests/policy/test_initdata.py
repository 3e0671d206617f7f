"""Initdata: TOML round trip, the annotation encoding, and the hash the TEE reports."""

from __future__ import annotations

import base64
import gzip
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.policy.initdata import (
    Initdata,
    InitdataError,
    decode_annotation,
    digest,
    encode_annotation,
    policy_hash,
)

POLICY = "package agent_policy\n\ndefault CreateContainerRequest := false\n"


def test_round_trip_and_hash_of_the_toml_bytes() -> None:
    toml = Initdata({"policy.rego": POLICY}).to_toml()
    # Byte for byte what genpolicy writes (research/kata-agent-policy-inputs.md §6.1).
    header = "version = '0.1.0'\nalgorithm = 'sha256'\n\n[data]\n"
    assert toml == (header + '"policy.rego" = ' + "'''\n" + POLICY + "'''\n").encode()
    assert Initdata.from_toml(toml).policy == POLICY
    assert digest(toml) == hashlib.sha256(toml).digest()
    assert policy_hash(toml) == hashlib.sha256(toml).digest()


def test_sha384_is_cut_to_32_bytes() -> None:
    toml = Initdata({"policy.rego": POLICY}, algorithm="sha384").to_toml()
    assert policy_hash(toml) == hashlib.sha384(toml).digest()[:32]


def test_annotation_is_base64_gzip_and_deterministic() -> None:
    toml = Initdata({"policy.rego": POLICY}).to_toml()
    annotation = encode_annotation(toml)
    assert annotation == encode_annotation(toml)
    assert gzip.decompress(base64.b64decode(annotation)) == toml
    assert decode_annotation(annotation) == toml


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not base64!", "not base64"),
        (base64.b64encode(b"plain").decode(), "not gzip"),
    ],
)
def test_bad_annotations(value: str, message: str) -> None:
    with pytest.raises(InitdataError, match=message):
        decode_annotation(value)


def test_zip_bomb_is_refused() -> None:
    bomb = base64.b64encode(gzip.compress(b"\0" * (17 * 1024 * 1024))).decode()
    with pytest.raises(InitdataError, match="inflates beyond"):
        decode_annotation(bomb)


@pytest.mark.parametrize(
    "toml",
    [
        b"\xff",
        b"= broken",
        b'algorithm = "md5"',
        b'algorithm = "sha256"\ndata = 1',
        b"a = " + b"[" * 5000 + b"]" * 5000,  # tomllib recurses per level
    ],
    ids=["not UTF-8", "broken", "md5", "data not a table", "deep nesting"],
)
def test_bad_documents(toml: bytes) -> None:
    with pytest.raises(InitdataError):
        Initdata.from_toml(toml)


@given(st.dictionaries(st.text(), st.text(), max_size=4), st.sampled_from(["sha256", "sha512"]))
def test_any_data_round_trips(data: dict[str, str], algorithm: str) -> None:
    toml = Initdata(data, algorithm).to_toml()
    assert Initdata.from_toml(toml) == Initdata(data, algorithm)


@given(st.text())
def test_any_annotation_text_gives_toml_or_initdata_error(value: str) -> None:
    try:
        toml = decode_annotation(value)
    except InitdataError:
        return
    assert len(toml) <= 16 * 1024 * 1024
