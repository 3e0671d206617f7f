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
import re
import tomllib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import tomli_w

from contrast.errors import ContrastError

ANNOTATION = "io.katacontainers.config.hypervisor.cc_init_data"
VERSION = "0.1.0"
POLICY_ENTRY = "policy.rego"
# Kubernetes caps an annotation at 256 KiB; a policy decompresses to a few hundred KiB at most.
MAXIMUM_DECOMPRESSED = 16 * 1024 * 1024
POLICY_HASH_SIZE = 32

_ALGORITHMS = {"sha256": hashlib.sha256, "sha384": hashlib.sha384, "sha512": hashlib.sha512}


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
# Literal strings hold anything but control characters (tab allowed; newlines in multi-line ones).
_LITERAL_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _toml_key(key: str) -> str:
    if _BARE_KEY.fullmatch(key):
        return key
    return tomli_w.dumps({key: 0})[: -len(" = 0\n")]  # a quoted key, escaped where needed


def _toml_string(value: str) -> str:
    """A TOML string as the Rust `toml` crate's pretty printer writes it."""
    if "\r" not in value and not _LITERAL_UNSAFE.search(value):
        if "\n" in value and "'''" not in value and not value.endswith("'"):
            return f"'''\n{value}'''"
        if "\n" not in value and "'" not in value:
            return f"'{value}'"
    return tomli_w.dumps({"v": value}, multiline_strings=False).removeprefix("v = ").rstrip("\n")


class InitdataError(ContrastError):
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


def digest(toml: bytes) -> bytes:
    """The hash the TEE reports for this initdata (the document's own algorithm)."""
    algorithm = Initdata.from_toml(toml).algorithm
    return _ALGORITHMS[algorithm](toml).digest()


def policy_hash(toml: bytes) -> bytes:
    """The 32 bytes in HOST_DATA / MRCONFIGID[:32]: the digest cut or zero-padded to 32."""
    value = digest(toml)
    return value[:POLICY_HASH_SIZE].ljust(POLICY_HASH_SIZE, b"\0")


def encode_annotation(toml: bytes) -> str:
    # mtime=0 so the same document always gives the same annotation (idempotent generate).
    return base64.b64encode(gzip.compress(toml, mtime=0)).decode()


def decode_annotation(value: str) -> bytes:
    """The TOML bytes inside an annotation value."""
    try:
        compressed = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InitdataError("the initdata annotation is not base64") from None
    decompressor = zlib.decompressobj(wbits=31)
    try:
        toml = decompressor.decompress(compressed, MAXIMUM_DECOMPRESSED)
    except zlib.error as error:
        raise InitdataError(f"the initdata annotation is not gzip: {error}") from None
    if decompressor.unconsumed_tail:
        raise InitdataError(f"the initdata annotation inflates beyond {MAXIMUM_DECOMPRESSED} bytes")
    return toml
