"""The certificate table of an extended SNP report (GHCB spec, SNP_GET_EXT_REPORT).

`/dev/sev-guest`'s extended report and configfs-tsm's `auxblob` return it beside the report: a
list of 24-byte entries {GUID (16 bytes, RFC 4122 order), offset u32 LE, length u32 LE} ended by
an all-zero entry, then the DER blobs the offsets point at (offsets count from the start of the
table). Layout per research/attestation.md §2.4.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from contrast.attestation.errors import MalformedEvidence, Reason

ARK_GUID = uuid.UUID("c0b406a4-a803-4952-9743-3fb6014cd0ae")
ASK_GUID = uuid.UUID("4ab7b379-bbac-4fe4-a02f-05aef327c782")  # also carries the ASVK
VCEK_GUID = uuid.UUID("63da758d-e664-4564-adc5-f4b93be8accd")
VLEK_GUID = uuid.UUID("a8074bc2-a25a-483e-aae6-39c045a0b8a1")
CRL_GUID = uuid.UUID("92f81bc3-5811-4d3d-97ff-d19f88dc67ea")  # virtee/sev's CRL entry

_ENTRY = struct.Struct("<16sII")
ENTRY_SIZE = _ENTRY.size  # 24
_TERMINATOR = bytes(ENTRY_SIZE)


@dataclass(frozen=True)
class CertTableEntry:
    guid: uuid.UUID
    data: bytes


@dataclass(frozen=True)
class CertTable:
    """The entries of a certificate table, in table order."""

    entries: tuple[CertTableEntry, ...] = ()

    def get(self, guid: uuid.UUID) -> bytes | None:
        """The first blob filed under `guid`, or None."""
        return next((entry.data for entry in self.entries if entry.guid == guid), None)

    @property
    def signing_certificate(self) -> bytes | None:
        """The VCEK, else the VLEK (DER), or None."""
        return self.get(VCEK_GUID) or self.get(VLEK_GUID)

    @classmethod
    def from_entries(cls, entries: Sequence[tuple[uuid.UUID, bytes]]) -> CertTable:
        return cls(tuple(CertTableEntry(guid, bytes(data)) for guid, data in entries))

    @classmethod
    def from_bytes(cls, data: bytes) -> CertTable:
        """Parse a table; an empty blob is an empty table (the host supplied no certificates).

        Raises MalformedEvidence(MALFORMED_CERT_TABLE) for a missing terminator, or an entry that
        points into the headers or past the end of the blob.
        """
        data = bytes(data)
        if not data:
            return cls()
        headers: list[tuple[uuid.UUID, int, int]] = []
        position = 0
        while True:
            if position + ENTRY_SIZE > len(data):
                raise _malformed("the table has no all-zero terminating entry")
            raw = data[position : position + ENTRY_SIZE]
            position += ENTRY_SIZE
            if raw == _TERMINATOR:
                break
            guid, offset, length = _ENTRY.unpack(raw)
            headers.append((uuid.UUID(bytes=guid), offset, length))
        entries = []
        for guid, offset, length in headers:
            if length and offset < position:
                raise _malformed(f"entry {guid} points into the table headers (offset {offset})")
            if offset + length > len(data):
                raise _malformed(
                    f"entry {guid} runs past the end: offset {offset} + length {length}"
                    f" > {len(data)} bytes"
                )
            entries.append(CertTableEntry(guid, data[offset : offset + length]))
        return cls(tuple(entries))

    def to_bytes(self) -> bytes:
        """Headers, terminator, then the blobs in entry order."""
        offset = ENTRY_SIZE * (len(self.entries) + 1)
        headers = bytearray()
        for entry in self.entries:
            headers += _ENTRY.pack(entry.guid.bytes, offset, len(entry.data))
            offset += len(entry.data)
        return bytes(headers) + _TERMINATOR + b"".join(entry.data for entry in self.entries)


def _malformed(message: str) -> MalformedEvidence:
    return MalformedEvidence(
        Reason.MALFORMED_CERT_TABLE,
        f"SNP certificate table: {message}",
        hint="pass the extended report's certificate blob (auxblob) unchanged",
    )
