"""Initdata: the TOML document the Kata runtime hands to the guest, whose hash the TEE reports.

`version = "0.1.0"`, `algorithm = "sha256"` and a `[data]` table whose `policy.rego` entry is the
agent policy. The pod annotation carries base64(gzip(TOML)); SNP HOST_DATA and the first 32 bytes
of TDX MRCONFIGID carry the hash of the TOML bytes (research/policy.md), which is why the manifest
keys workloads by it and why the bytes, not a re-serialisation, are what gets hashed.

`to_toml()` writes the bytes genpolicy writes (Rust `toml` pretty printer,
research/kata-agent-policy-inputs.md §6.1): literal strings, the policy as a multi-line literal
string closed right after its last byte. The same policy text therefore gets the same HOSTDATA as
with the original. A value a literal string cannot hold falls back to an escaped basic string.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import importlib
import re
import struct
import tomllib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import NamedTuple

import tomli_w

from contrast.policy.errors import PolicyError

ANNOTATION = "io.katacontainers.config.hypervisor.cc_init_data"
VERSION = "0.1.0"
POLICY_ENTRY = "policy.rego"
# Kubernetes caps an annotation at 256 KiB; a policy decompresses to a few hundred KiB at most.
MAXIMUM_DECOMPRESSED = 16 * 1024 * 1024
POLICY_HASH_SIZE = 32
# `generate --insecure-enable-debug-shell-access` adds this entry, as the original: the guest
# starts its debug service for it, and the policy hash (so the attestation) shows it.
INSECURE_DEBUG_ENTRY = "contrast.insecure-debug"


def _optional(name: str, fallback: ModuleType) -> ModuleType:
    """Module `name`, or `fallback` (the standard library's, which reads the same bytes the same
    way, more slowly) where it is not installed: the release images carry only what their
    components import (imagebuild/spec.py), and the Coordinator imports this module too."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return fallback


# Annotations are read by pybase64 and inflated by zlib-ng where they are installed (the CLI's
# dependencies): `set` reads 126 MB of base64 and inflates ~545 MB at 10 000 generated workloads.
_BASE64 = _optional("pybase64", base64)
_ZLIB = _optional("zlib_ng.zlib_ng", zlib)
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _ZLIB.error)

_ALGORITHMS = {"sha256": hashlib.sha256, "sha384": hashlib.sha384, "sha512": hashlib.sha512}


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
# Literal strings hold anything but control characters (tab allowed; newlines in multi-line ones).
_LITERAL_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _toml_key(key: str) -> str:
    known = _KNOWN_KEYS.get(key)
    if known is not None:
        return known
    if _BARE_KEY.fullmatch(key):
        return key
    return tomli_w.dumps({key: 0})[: -len(" = 0\n")]  # a quoted key, escaped where needed


# The keys every generated policy has, written once: tomli_w took 10 us a key, read or written.
_KNOWN_KEYS: dict[str, str] = {}
_KNOWN_KEYS.update({key: _toml_key(key) for key in (POLICY_ENTRY, INSECURE_DEBUG_ENTRY)})


def _toml_string(value: str) -> str:
    """A TOML string as the Rust `toml` crate's pretty printer writes it."""
    if "\r" not in value and not _LITERAL_UNSAFE.search(value):
        if "\n" in value and "'''" not in value and not value.endswith("'"):
            return f"'''\n{value}'''"
        if "\n" not in value and "'" not in value:
            return f"'{value}'"
    return tomli_w.dumps({"v": value}, multiline_strings=False).removeprefix("v = ").rstrip("\n")


class InitdataError(PolicyError):
    """An initdata annotation or document that cannot be read."""


@dataclass(frozen=True)
class Initdata:
    data: Mapping[str, str] = field(default_factory=dict)
    algorithm: str = "sha256"
    version: str = VERSION

    def to_toml(self) -> bytes:
        lines = [
            f"version = {_toml_string(self.version)}",
            f"algorithm = {_toml_string(self.algorithm)}",
            "",
            "[data]",
        ]
        # genpolicy's map has no defined order; ours is sorted, so the bytes are reproducible.
        lines += [f"{_toml_key(k)} = {_toml_string(v)}" for k, v in sorted(self.data.items())]
        return ("\n".join(lines) + "\n").encode()

    @classmethod
    def from_toml(cls, text: bytes) -> Initdata:
        """The document `text` holds; an `InitdataError` for anything else.

        The bytes `to_toml` writes (every generated policy's) are read by `_read_written`, in a
        tenth of tomllib's time (a generated 54 KB document: 0.3 ms against 3 ms); anything else
        is left to tomllib, so both readings give the same document or the same refusal.
        """
        written = _read_written(text)
        if written is not None:
            return written
        try:
            document = tomllib.loads(text.decode())
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
            raise InitdataError(f"initdata is not TOML: {error}") from None
        except RecursionError:  # tomllib recurses per level of nested arrays and tables
            raise InitdataError("initdata is TOML nested more deeply than it can be read") from None
        algorithm = document.get("algorithm")
        data = document.get("data", {})
        if algorithm not in _ALGORITHMS:
            raise InitdataError(f"initdata algorithm {algorithm!r} is not one of sha256/384/512")
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise InitdataError("initdata [data] must map names to strings")
        return cls(data, algorithm, str(document.get("version", VERSION)))

    @property
    def policy(self) -> str | None:
        return self.data.get(POLICY_ENTRY)

    @property
    def insecure_debug(self) -> bool:
        """Whether this pod's guest opens the insecure debug shell (`contrast.insecure-debug`)."""
        return self.data.get(INSECURE_DEBUG_ENTRY, "").strip().lower() == "true"

    def policy_hash_of(self, toml: bytes) -> bytes:
        """`policy_hash(toml)` for `toml = self.to_toml()`, without reading the TOML back.

        The algorithm is this document's own: parsing a 70 KB TOML to learn it again was a
        third of what encoding a policy cost.
        """
        return (
            _ALGORITHMS[self.algorithm](toml)
            .digest()[:POLICY_HASH_SIZE]
            .ljust(POLICY_HASH_SIZE, b"\0")
        )


# The header `to_toml` writes: two literal strings and the data table.
_WRITTEN_HEADER = re.compile(
    r"version = '([^'\n]*)'\nalgorithm = '(sha256|sha384|sha512)'\n\n\[data\]\n"
)
_WRITTEN_KEY = re.compile(r'([A-Za-z0-9_-]+|"[^"\\\n]*") = ')
# Bytes no literal string may hold: control characters but tab and newline (and so no CR). In
# UTF-8 they only ever stand for themselves, so one pass over the bytes covers every string
# (deleting them and comparing lengths: five times faster than a regular expression's search).
_UNSAFE_BYTES = bytes([*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F])


def _read_written(text: bytes) -> Initdata | None:
    """The document if `text` is exactly what `to_toml` writes for it, else None.

    Accepted only where every piece is the one `to_toml` would write for the value read from
    it (the key's form, the string's form, the sorted order), so `text == result.to_toml()`,
    which tomllib reads as the same document (tests/policy/test_initdata.py checks both on
    arbitrary documents and on every one-byte change of one). Anything else, even valid TOML
    of the same document, is None: for tomllib to read, or to refuse.
    """
    if len(text.translate(None, _UNSAFE_BYTES)) != len(text):
        return None
    try:
        document = text.decode()
    except UnicodeDecodeError:
        return None
    header = _WRITTEN_HEADER.match(document)
    if header is None:
        return None
    version, algorithm = header.groups()
    data: dict[str, str] = {}
    previous: str | None = None
    at, end = header.end(), len(document)
    while at < end:
        entry = _WRITTEN_KEY.match(document, at)
        if entry is None:
            return None
        written_key = entry.group(1)
        key = written_key[1:-1] if written_key.startswith('"') else written_key
        if (previous is not None and key <= previous) or _toml_key(key) != written_key:
            return None
        at = entry.end()
        if document.startswith("'''\n", at):  # a multi-line literal string
            close = document.find("'''", at + 4)
            value = document[at + 4 : close]
            if close < 0 or "\n" not in value or value.endswith("'"):
                return None
            at = close + 3
        elif document.startswith("'", at):  # a one-line literal string
            close = document.find("'", at + 1)
            value = document[at + 1 : close]
            if close < 0 or "\n" in value:
                return None
            at = close + 1
        else:
            return None
        if not document.startswith("\n", at):
            return None
        at += 1
        data[key] = value
        previous = key
    return Initdata(data, algorithm, version)


_WRITTEN_HEADER_BYTES = re.compile(_WRITTEN_HEADER.pattern.encode())
_WRITTEN_KEY_BYTES = re.compile(_WRITTEN_KEY.pattern.encode())


def _written_algorithm(text: bytes) -> str | None:
    """The algorithm of `text` if `_read_written` takes it, else None; without reading the data.

    `digest` needs only the algorithm and whether the document is valid. `_read_written` decodes
    the whole text and copies every value out of it, most of its time for a 54 KB policy;
    here the same checks run on the bytes, in place: once the text is known to be UTF-8, the
    ASCII characters the checks look for (quotes, newlines, `=`) are at the same places in the
    bytes, and UTF-8's byte order is the code points' order, so keys sort the same. Its answer
    is `_read_written`'s algorithm (tests/policy/test_initdata.py checks both on the same inputs).
    """
    if len(text.translate(None, _UNSAFE_BYTES)) != len(text):
        return None
    if not text.isascii():
        try:
            text.decode()
        except UnicodeDecodeError:
            return None
    header = _WRITTEN_HEADER_BYTES.match(text)
    if header is None:
        return None
    previous: bytes | None = None
    at, end = header.end(), len(text)
    while at < end:
        entry = _WRITTEN_KEY_BYTES.match(text, at)
        if entry is None:
            return None
        written_key = entry.group(1)
        key = written_key[1:-1] if written_key.startswith(b'"') else written_key
        if previous is not None and key <= previous:
            return None
        if _toml_key(key.decode()) != written_key.decode():
            return None
        at = entry.end()
        if text.startswith(b"'''\n", at):  # a multi-line literal string
            start = at + 4
            close = _closing_quotes(text, start)
            if close < 0 or text.find(b"\n", start, close) < 0 or text[close - 1] == 0x27:
                return None  # not closed, one line, or ends with a quote (0x27)
            at = close + 3
        elif text.startswith(b"'", at):  # a one-line literal string
            close = text.find(b"'", at + 1)
            if close < 0 or text.find(b"\n", at + 1, close) >= 0:
                return None
            at = close + 1
        else:
            return None
        if not text.startswith(b"\n", at):
            return None
        at += 1
        previous = key
    return header.group(2).decode()


def _closing_quotes(text: bytes, start: int) -> int:
    """`text.find(b"'''", start)`, from one quote to the next: a one-byte find is a memchr,
    several times faster than finding three bytes through a 50 KB policy with few quotes."""
    at = text.find(b"'", start)
    while at >= 0 and not text.startswith(b"''", at + 1):
        at = text.find(b"'", at + 1)
    return at


def digest(toml: bytes) -> bytes:
    """The hash the TEE reports for this initdata (the document's own algorithm).

    A document as `to_toml` writes it (every generated one) is known valid, with its algorithm,
    by `_written_algorithm`; anything else is read (or refused) by `Initdata.from_toml`.
    """
    algorithm = _written_algorithm(toml) or Initdata.from_toml(toml).algorithm
    return _ALGORITHMS[algorithm](toml).digest()


def policy_hash(toml: bytes) -> bytes:
    """The 32 bytes in HOST_DATA / MRCONFIGID[:32]: the digest cut or zero-padded to 32."""
    value = digest(toml)
    return value[:POLICY_HASH_SIZE].ljust(POLICY_HASH_SIZE, b"\0")


def encode_annotation(toml: bytes) -> str:
    # mtime=0 so the same document always gives the same annotation (idempotent generate).
    return base64.b64encode(gzip.compress(toml, mtime=0)).decode()


def _base64(value: str) -> bytes:
    """`base64.b64decode(value, validate=True)`, by pybase64 where it can (2.5 us for a generated
    annotation, against 67 us). pybase64 refuses more than the standard library (padding after a
    complete group, which the standard library ignores); whatever it refuses is left to the
    standard library, so the result and the refusals are the standard library's
    (tests/policy/test_initdata.py compares both on arbitrary text)."""
    try:
        decoded: bytes = _BASE64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return base64.b64decode(value, validate=True)
    return decoded


def decode_annotation(value: str) -> bytes:
    """The TOML bytes inside an annotation value."""
    try:
        compressed = _base64(value)
    except (binascii.Error, ValueError):
        raise InitdataError("the initdata annotation is not base64") from None
    # zlib-ng's inflate (see _ZLIB): the same stream read the same way (a bound, the tail left
    # over, data after the stream ignored), in about 0.7 of zlib's time.
    decompressor = _ZLIB.decompressobj(wbits=31)
    try:
        toml: bytes = decompressor.decompress(compressed, MAXIMUM_DECOMPRESSED)
    except _INFLATE_ERRORS as error:
        raise InitdataError(f"the initdata annotation is not gzip: {error}") from None
    if decompressor.unconsumed_tail:
        raise InitdataError(f"the initdata annotation inflates beyond {MAXIMUM_DECOMPRESSED} bytes")
    return toml


class EncodedPolicy(NamedTuple):
    """A policy's initdata TOML, its pod annotation and its policy hash (32 bytes)."""

    toml: bytes
    annotation: str
    policy_hash: bytes


def encode_policy(policy: str, extra: Mapping[str, str] | None = None) -> EncodedPolicy:
    """The initdata of `policy` (sha256; the policy and the `extra` entries), from scratch."""
    initdata = Initdata({**(extra or {}), POLICY_ENTRY: policy})
    toml = initdata.to_toml()
    return EncodedPolicy(toml, encode_annotation(toml), initdata.policy_hash_of(toml))


# What `_toml_string` needs of a text to write it as a multi-line literal string, checked on a
# part of it: a `'''` across the seam is checked with the last two characters before it.
_NOT_IN_LITERAL = ("\r", "'''")
_LITERAL_CLOSE = b"'''\n"


class PolicyEncoder:
    """Encodes policies that all begin with the same text (the rules), doing that part once.

    Every policy of a `generate` run starts with the rules (about 37 KB, half of its initdata).
    Their TOML is deflated, checksummed and hashed once here; each policy continues from copies
    of those states with its own `policy_data`. Deflate without a flush writes the same bytes
    however its input is split, so the result is `encode_policy(policy)`'s byte for byte; the
    constructor checks that on a sample (a zlib or gzip that differs turns the shortcut off),
    and a policy the literal TOML form cannot hold is encoded from scratch.
    """

    def __init__(self, prefix: str, extra: Mapping[str, str] | None = None) -> None:
        self.prefix = prefix
        # Other entries of every policy's initdata (the debug flag); the shortcut needs the
        # policy to be the last entry, so they must sort before it.
        self.extra = dict(extra or {})
        closing = len(_LITERAL_CLOSE) + 1  # the last newline of the sample's value, and `'''\n`
        head = Initdata({**self.extra, POLICY_ENTRY: prefix + "\n"}).to_toml()[:-closing]
        self._head = head
        self._usable = (
            "\n" in prefix
            and head.endswith(prefix.encode())
            and _literal_part(prefix, "")
            and all(key < POLICY_ENTRY for key in self.extra)
        )
        self._gzip_header = gzip.compress(b"", mtime=0)[:10]
        self._deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
        self._deflated_head = self._deflate.compress(head)
        self._crc = zlib.crc32(head)
        self._sha256 = hashlib.sha256(head)
        sample = prefix + '{\n  "sample": "\u00e9"\n}'
        self._usable = self._usable and self.encode(sample) == encode_policy(sample, self.extra)

    def encode(self, policy: str) -> EncodedPolicy:
        """`encode_policy(policy)`, from the states after the shared prefix where it can."""
        if not self._usable or not policy.startswith(self.prefix):
            return encode_policy(policy, self.extra)
        rest = policy[len(self.prefix) :]
        if not _literal_part(rest, self.prefix[-2:]) or policy.endswith("'"):
            return encode_policy(policy, self.extra)
        tail = rest.encode() + _LITERAL_CLOSE
        deflate = self._deflate.copy()
        deflated = self._deflated_head + deflate.compress(tail) + deflate.flush()
        size = len(self._head) + len(tail)
        trailer = struct.pack("<LL", zlib.crc32(tail, self._crc), size & 0xFFFFFFFF)
        compressed = self._gzip_header + deflated + trailer
        digest = self._sha256.copy()
        digest.update(tail)
        return EncodedPolicy(
            self._head + tail, base64.b64encode(compressed).decode(), digest.digest()
        )


def _literal_part(text: str, before: str) -> bool:
    """Whether `text`, following `before` in a value, keeps it a multi-line literal string."""
    if _LITERAL_UNSAFE.search(text):
        return False
    return not any(needle in before + text for needle in _NOT_IN_LITERAL)
