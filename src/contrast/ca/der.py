"""The few DER encodings a mesh leaf's TBSCertificate needs around parts cryptography encodes.

Names, keys and extension values are encoded by cryptography itself (`Name.public_bytes`,
`ExtensionType.public_bytes`, `public_bytes(DER, SubjectPublicKeyInfo)`); this module only frames
them: lengths, the serial INTEGER, the validity times and each Extension's SEQUENCE. A test holds
the TBSCertificate assembled from these to the bytes `CertificateBuilder` encodes for the same
leaf.
"""

from __future__ import annotations

from datetime import UTC, datetime

from cryptography.x509 import ObjectIdentifier

SEQUENCE = 0x30
INTEGER = 0x02
BIT_STRING = 0x03
OCTET_STRING = 0x04
OBJECT_IDENTIFIER = 0x06
UTC_TIME = 0x17
GENERALIZED_TIME = 0x18
# RFC 5280 4.1.2.5: dates before 2050 as UTCTime, from 2050 on as GeneralizedTime.
_UTC_TIME_BEFORE = 2050
_CRITICAL = b"\x01\x01\xff"  # BOOLEAN TRUE; FALSE is the DEFAULT and so never encoded


def tlv(tag: int, content: bytes) -> bytes:
    """Tag, definite length, content."""
    length = len(content)
    if length < 0x80:
        return bytes((tag, length)) + content
    size = (length.bit_length() + 7) // 8
    return bytes((tag, 0x80 | size)) + length.to_bytes(size, "big") + content


def integer(value: int) -> bytes:
    """A non-negative INTEGER in its shortest two's-complement form."""
    if value < 0:
        raise ValueError("only non-negative integers are encoded here")
    return tlv(INTEGER, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def time(moment: datetime) -> bytes:
    """UTCTime or GeneralizedTime to the second, in UTC (a naive datetime is taken as UTC)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    day = f"{moment.month:02d}{moment.day:02d}"
    clock = f"{day}{moment.hour:02d}{moment.minute:02d}{moment.second:02d}Z"
    if moment.year < _UTC_TIME_BEFORE:
        return tlv(UTC_TIME, f"{moment.year % 100:02d}{clock}".encode())
    return tlv(GENERALIZED_TIME, f"{moment.year:04d}{clock}".encode())


def object_identifier(oid: ObjectIdentifier) -> bytes:
    arcs = [int(arc) for arc in oid.dotted_string.split(".")]
    body = bytearray([arcs[0] * 40 + arcs[1]])
    for arc in arcs[2:]:
        chunk = [arc & 0x7F]
        rest = arc >> 7
        while rest:
            chunk.append(0x80 | (rest & 0x7F))
            rest >>= 7
        body += bytes(reversed(chunk))
    return tlv(OBJECT_IDENTIFIER, bytes(body))


def extension(oid: ObjectIdentifier, *, critical: bool, value: bytes) -> bytes:
    """Extension ::= SEQUENCE { extnID, critical BOOLEAN DEFAULT FALSE, extnValue OCTET STRING }."""
    flag = _CRITICAL if critical else b""
    return tlv(SEQUENCE, object_identifier(oid) + flag + tlv(OCTET_STRING, value))
