"""Just enough DER to read and write Intel's SGX PCK certificate extension.

`cryptography` hands the extension (OID 1.2.840.113741.1.13.1) over as opaque bytes and no
dependency of ours parses it, so this module reads the handful of universal types it uses
(SEQUENCE, OBJECT IDENTIFIER, INTEGER, ENUMERATED, OCTET STRING, BOOLEAN) strictly: definite
lengths only, every length bounds-checked, and any violation raised as `MalformedEvidence`.
The writer exists for the emulated TEE, which must produce the same structure.
"""

from __future__ import annotations

from dataclasses import dataclass

from contrast.attestation.errors import MalformedEvidence, Reason

TAG_BOOLEAN = 0x01
TAG_INTEGER = 0x02
TAG_OCTET_STRING = 0x04
TAG_OID = 0x06
TAG_ENUMERATED = 0x0A
TAG_SEQUENCE = 0x30

_MAX_LENGTH_OCTETS = 4


def _malformed(message: str) -> MalformedEvidence:
    return MalformedEvidence(Reason.MALFORMED_CERTIFICATE, f"SGX PCK extension: {message}")


@dataclass(frozen=True)
class Element:
    """One TLV: its tag and content octets."""

    tag: int
    content: bytes

    def children(self) -> list[Element]:
        if self.tag != TAG_SEQUENCE:
            raise _malformed(f"expected a SEQUENCE, found tag {self.tag:#04x}")
        return read_all(self.content)

    def oid(self) -> str:
        if self.tag != TAG_OID:
            raise _malformed(f"expected an OBJECT IDENTIFIER, found tag {self.tag:#04x}")
        return decode_oid(self.content)

    def integer(self) -> int:
        if self.tag not in (TAG_INTEGER, TAG_ENUMERATED):
            raise _malformed(f"expected an INTEGER, found tag {self.tag:#04x}")
        if not self.content:
            raise _malformed("empty INTEGER")
        if len(self.content) > 1 and (
            (self.content[0] == 0 and self.content[1] < 0x80)
            or (self.content[0] == 0xFF and self.content[1] >= 0x80)
        ):
            raise _malformed("INTEGER is not minimally encoded")
        return int.from_bytes(self.content, "big", signed=True)

    def octets(self) -> bytes:
        if self.tag != TAG_OCTET_STRING:
            raise _malformed(f"expected an OCTET STRING, found tag {self.tag:#04x}")
        return self.content

    def boolean(self) -> bool:
        if self.tag != TAG_BOOLEAN or len(self.content) != 1:
            raise _malformed("expected a one-byte BOOLEAN")
        return self.content != b"\x00"


def read_one(data: bytes, offset: int = 0) -> tuple[Element, int]:
    """The element starting at `offset` and the offset just after it."""
    if offset + 2 > len(data):
        raise _malformed("truncated element header")
    tag = data[offset]
    if tag & 0x1F == 0x1F:
        raise _malformed("multi-byte tags are not used here")
    length = data[offset + 1]
    position = offset + 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0:
            raise _malformed("indefinite lengths are not DER")
        if count > _MAX_LENGTH_OCTETS or position + count > len(data):
            raise _malformed("length field runs past the end")
        length = int.from_bytes(data[position : position + count], "big")
        position += count
    end = position + length
    if end > len(data):
        raise _malformed(f"element of {length} bytes runs past the end of its container")
    return Element(tag, data[position:end]), end


def read_all(data: bytes) -> list[Element]:
    """Every element in `data`, which must contain nothing else."""
    elements = []
    offset = 0
    while offset < len(data):
        element, offset = read_one(data, offset)
        elements.append(element)
    return elements


def read_single(data: bytes) -> Element:
    element, end = read_one(data)
    if end != len(data):
        raise _malformed(f"{len(data) - end} bytes after the value")
    return element


def decode_oid(content: bytes) -> str:
    if not content or content[-1] & 0x80:
        raise _malformed("truncated OBJECT IDENTIFIER")
    arcs: list[int] = []
    value = 0
    for byte in content:
        if value == 0 and byte == 0x80:
            raise _malformed("OBJECT IDENTIFIER arc is not minimally encoded")
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(str(arc) for arc in [first, arcs[0] - 40 * first, *arcs[1:]])


# Writing (for the emulated TEE).


def encode(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        header = bytes([tag, size])
    else:
        octets = size.to_bytes((size.bit_length() + 7) // 8, "big")
        header = bytes([tag, 0x80 | len(octets)]) + octets
    return header + content


def encode_oid(dotted: str) -> bytes:
    arcs = [int(part) for part in dotted.split(".")]
    values = [40 * arcs[0] + arcs[1], *arcs[2:]]
    content = bytearray()
    for arc in values:
        chunk = [arc & 0x7F]
        rest = arc >> 7
        while rest:
            chunk.append(0x80 | (rest & 0x7F))
            rest >>= 7
        content.extend(reversed(chunk))
    return encode(TAG_OID, bytes(content))


def encode_integer(value: int, *, tag: int = TAG_INTEGER) -> bytes:
    length = max(1, (value.bit_length() + 8) // 8)
    return encode(tag, value.to_bytes(length, "big", signed=True))


def encode_sequence(*items: bytes) -> bytes:
    return encode(TAG_SEQUENCE, b"".join(items))
