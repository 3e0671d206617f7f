"""Initdata: TOML round trip, the annotation encoding, and the hash the TEE reports."""

from __future__ import annotations

import base64
import gzip
import hashlib
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.policy.initdata import (
    Initdata,
    InitdataError,
    PolicyEncoder,
    decode_annotation,
    digest,
    encode_annotation,
    encode_policy,
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


RULES = POLICY * 50 + "\npolicy_data := "


@given(st.text(max_size=300))
def test_policy_encoder_writes_what_encoding_from_scratch_writes(data: str) -> None:
    # From scratch means the TOML read back for its algorithm, as before the encoder existed.
    encoder = PolicyEncoder(RULES)
    for policy in (RULES + data, RULES + "{\n" + data + "\n}", data):
        encoded = encoder.encode(policy)
        toml = Initdata({"policy.rego": policy}).to_toml()
        assert encoded == (toml, encode_annotation(toml), policy_hash(toml))
        assert encoded == encode_policy(policy)


@pytest.mark.parametrize(
    "rest",
    [
        "",  # the rules alone
        "'",  # ends with a quote: a basic string
        "''x",  # `'''` across the seam with the rules' end
        "{\r\n}",  # a carriage return: a basic string
        "x\x01y",  # a control character
        "a'''b",  # the literal's delimiter inside
        "é\n" * 5000,  # long, beyond one deflate block
    ],
)
def test_policy_encoder_at_the_edges_of_the_literal_form(rest: str) -> None:
    rules = RULES + "'"  # ends with a quote, so `''x` closes a `'''` across the seam
    encoded = PolicyEncoder(rules).encode(rules + rest)
    toml = Initdata({"policy.rego": rules + rest}).to_toml()
    assert encoded == (toml, encode_annotation(toml), policy_hash(toml))
    assert Initdata.from_toml(encoded.toml).policy == rules + rest


@given(st.binary(min_size=1, max_size=20000), st.integers(min_value=0, max_value=20000))
def test_deflate_writes_the_same_bytes_however_the_input_is_split(data: bytes, at: int) -> None:
    # What PolicyEncoder relies on: no flush between the parts, so the same stream.
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(data[:at])
    rest = deflate.copy()  # as PolicyEncoder continues: from a copy of the state
    split = first + rest.compress(data[at:]) + rest.flush()
    assert split == zlib.compress(data, level=9, wbits=-15)


@pytest.mark.parametrize("at", [1, 32767, 32768, 32769, 65536 + 258, 150001])
def test_deflate_split_beyond_the_window(at: int) -> None:
    # Compressible text longer than deflate's 32 KiB window, split around its edges.
    words = [hashlib.sha256(bytes([i])).hexdigest()[: i % 13 + 1] for i in range(256)]
    data = " ".join(words[(i * i + 7 * i) % 256] for i in range(60000)).encode()
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(data[:at])
    rest = deflate.copy()
    assert first + rest.compress(data[at:]) + rest.flush() == zlib.compress(data, 9, wbits=-15)
