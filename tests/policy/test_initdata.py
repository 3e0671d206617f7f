"""Initdata: TOML round trip, the annotation encoding, and the hash the TEE reports."""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import subprocess
import sys
import tomllib
import zlib
from pathlib import Path

import pybase64
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.policy.initdata import (
    INSECURE_DEBUG_ENTRY,
    Initdata,
    InitdataError,
    PolicyEncoder,
    _base64,
    _closing_quotes,
    _read_written,
    _written_algorithm,
    decode_annotation,
    digest,
    encode_annotation,
    encode_policy,
    policy_hash,
)

ASSETS = Path(__file__).resolve().parents[2] / "src" / "contrast" / "policy" / "assets"
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


def _zlib_reading(value: str) -> bytes | str:
    """What decode_annotation gave with the standard library's zlib (its code before zlib-ng)."""
    try:
        compressed = base64.b64decode(value, validate=True)
    except ValueError:
        return "not base64"
    decompressor = zlib.decompressobj(wbits=31)
    try:
        toml = decompressor.decompress(compressed, 16 * 1024 * 1024)
    except zlib.error:
        return "not gzip"
    return "inflates beyond" if decompressor.unconsumed_tail else toml


def _reading(value: str) -> bytes | str:
    try:
        return decode_annotation(value)
    except InitdataError as error:
        return next(m for m in ("not base64", "not gzip", "inflates beyond") if m in str(error))


@given(st.binary(max_size=400), st.integers(min_value=0, max_value=500), st.binary(max_size=3))
def test_zlib_ng_reads_any_annotation_as_zlib_did(data: bytes, at: int, change: bytes) -> None:
    # A valid stream, then cut, changed or extended anywhere: the same bytes or the same refusal.
    compressed = gzip.compress(data, mtime=0)
    for variant in (compressed, compressed[:at], compressed[:at] + change + compressed[at + 1 :]):
        value = base64.b64encode(variant).decode()
        assert _reading(value) == _zlib_reading(value)


def test_zlib_ng_reads_streams_as_zlib_did_at_the_edges() -> None:
    member = gzip.compress(b"x" * 1000, mtime=0)
    exact = gzip.compress(b"\0" * (16 * 1024 * 1024), mtime=0)
    for variant in (member + member, member + b"junk", exact, exact[:-1], b"", member[:10]):
        value = base64.b64encode(variant).decode()
        assert _reading(value) == _zlib_reading(value)


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


# The fast reading of what `to_toml` writes (`_read_written`) against tomllib's: it either
# declines (None: tomllib reads or refuses) or gives what tomllib gives, for exactly the bytes
# `to_toml` writes for that document.


def _tomllib_reading(toml: bytes) -> Initdata | InitdataError:
    """What `from_toml` gives with the fast reading out of the way."""
    try:
        document = tomllib.loads(toml.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as error:
        return InitdataError(str(error))
    data, algorithm = document.get("data", {}), document.get("algorithm")
    if algorithm not in ("sha256", "sha384", "sha512") or not isinstance(data, dict):
        return InitdataError("refused")
    if not all(isinstance(v, str) for v in data.values()):
        return InitdataError("refused")
    return Initdata(data, algorithm, str(document.get("version", "0.1.0")))


def _agrees(toml: bytes) -> bool:
    """Whether the fast reading declines `toml` (else it read what tomllib reads, checked).

    `_written_algorithm`, which `digest` asks, declines the same inputs and otherwise gives the
    algorithm of what was read: checked on every input of these tests.
    """
    read = _read_written(toml)
    assert _written_algorithm(toml) == (None if read is None else read.algorithm)
    if read is None:
        return True
    assert read.to_toml() == toml
    assert _tomllib_reading(toml) == read
    return False


def test_the_fast_reading_takes_a_generated_policy() -> None:
    rules = (ASSETS / "rules.rego").read_text() + (ASSETS / "settings.json").read_text()
    initdata = Initdata({INSECURE_DEBUG_ENTRY: "true", "policy.rego": rules + "\n# web\n"})
    toml = initdata.to_toml()
    assert len(toml) > 50_000
    assert _read_written(toml) == initdata == Initdata.from_toml(toml)
    assert not _agrees(toml)


@given(
    st.dictionaries(st.text(), st.text(), max_size=4),
    st.sampled_from(["sha256", "sha384", "sha512"]),
    st.text(),
)
def test_the_fast_reading_of_any_written_document_is_tomllibs(
    data: dict[str, str], algorithm: str, version: str
) -> None:
    toml = Initdata(data, algorithm, version).to_toml()
    _agrees(toml)
    assert Initdata.from_toml(toml) == _tomllib_reading(toml)


@given(st.binary(max_size=200))
def test_the_fast_reading_of_any_bytes_declines_or_agrees(toml: bytes) -> None:
    _agrees(b"version = '0.1.0'\nalgorithm = 'sha256'\n\n[data]\n" + toml)
    _agrees(toml)


@pytest.mark.parametrize(
    "data",
    [
        {"policy.rego": POLICY},
        {"a": "one line", "b-c_d": "x\ny", "": "", "policy.rego": POLICY, "é": "ü\n"},
        {"policy.rego": "ends with a quote'\n"},
        {"policy.rego": "has ''' inside\n"},
        {"k": "it's"},
        {"k": "tab\there\n"},
    ],
)
def test_every_one_byte_change_of_a_document_is_declined_or_read_as_tomllib_reads_it(
    data: dict[str, str],
) -> None:
    toml = Initdata(data).to_toml()
    changes = [b"", b"'", b'"', b"\n", b"\r", b"\\", b"=", b" ", b"[", b"a", b"\x00", b"\xc3"]
    accepted = 0
    for at in range(len(toml) + 1):
        for change in changes:
            for changed in (toml[:at] + change + toml[at + 1 :], toml[:at] + change + toml[at:]):
                accepted += not _agrees(changed)
    # Where the document itself is read fast (no basic string in it), some changes are too:
    # another document that `to_toml` writes that way (a letter more in a value).
    assert (accepted > 0) == (_read_written(toml) is not None)


def test_what_to_toml_does_not_write_is_left_to_tomllib() -> None:
    written = Initdata({"policy.rego": POLICY}).to_toml()
    for other in (
        written.replace(b"'0.1.0'", b'"0.1.0"'),  # a basic string: valid TOML, not ours
        written.replace(b'"policy.rego"', b"'policy.rego'"),  # a literal key
        written + b"\n",  # a blank line at the end
        written.replace(b"\n", b"\r\n"),
        written.replace(b"[data]\n", b"[data]\nb = 'x'\na = 'y'\n"),  # unsorted
        written.replace(b"[data]\n", b"[data]\nZ = 'x'\nZ = 'y'\n"),  # a duplicate key
    ):
        assert _read_written(other) is None
    assert Initdata.from_toml(written.replace(b"'0.1.0'", b'"0.1.0"')).policy == POLICY
    with pytest.raises(InitdataError):
        Initdata.from_toml(written.replace(b"[data]\n", b"[data]\nZ = 'x'\nZ = 'y'\n"))


@given(
    st.lists(st.sampled_from([b"'", b"a", b"\n", b"''", b"\xc3\xa9"]), max_size=30),
    st.integers(0, 40),
)
def test_closing_quotes_is_the_find_of_three_quotes(parts: list[bytes], start: int) -> None:
    text = b"".join(parts)
    assert _closing_quotes(text, start) == text.find(b"'''", start)


def _standard(value: str) -> bytes | str:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return "refused"


def _ours(value: str) -> bytes | str:
    try:
        return _base64(value)
    except (binascii.Error, ValueError):
        return "refused"


BASE64_TEXT = st.text(
    alphabet=st.sampled_from(
        [
            *"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
            *("=", "=", " ", "\n", "-", "_", "\x00", "é", "."),
        ]
    ),
    max_size=24,
)


@given(st.one_of(BASE64_TEXT, st.text(max_size=24)))
def test_base64_reads_any_text_as_the_standard_library(value: str) -> None:
    assert _ours(value) == _standard(value)
    # What pybase64 takes, it reads as the standard library does: only its refusals differ.
    try:
        taken = pybase64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return
    assert taken == _standard(value)


@given(st.binary(max_size=40), st.integers(0, 60), st.sampled_from(["=", "A", "", " ", "=="]))
def test_base64_of_any_bytes_changed_anywhere_reads_as_the_standard_library(
    data: bytes, at: int, change: str
) -> None:
    encoded = base64.b64encode(data).decode()
    for value in (encoded, encoded[:at] + change + encoded[at:], encoded[:at] + change):
        assert _ours(value) == _standard(value)


def test_padding_after_a_full_group_is_the_standard_librarys_reading() -> None:
    # pybase64 refuses these, the standard library ignores the padding: its reading stands.
    for value in ("YxXo=", "WD4A=", "6EZM3YNx="):
        assert _ours(value) == base64.b64decode(value, validate=True) != "refused"


def test_without_pybase64_and_zlib_ng_the_standard_library_reads_annotations() -> None:
    # The release images carry only what their components import (imagebuild/spec.py): the
    # Coordinator's and the node installer's import this module without either package.
    toml = Initdata({"policy.rego": POLICY * 100}).to_toml()
    script = (
        "import sys\n"
        "sys.modules['pybase64'] = sys.modules['zlib_ng'] = None  # import raises ImportError\n"
        "from contrast.policy import initdata\n"
        "assert initdata._BASE64.__name__ == 'base64' and initdata._ZLIB.__name__ == 'zlib'\n"
        f"assert initdata.decode_annotation({encode_annotation(toml)!r}) == {toml!r}\n"
        "for bad in ('not base64!', 'YWJj'):\n"
        "    try:\n"
        "        initdata.decode_annotation(bad)\n"
        "    except initdata.InitdataError as error:\n"
        "        print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "the initdata annotation is not base64",
        "the initdata annotation is not gzip: Error -3 while decompressing data: incorrect header"
        " check",
    ]
