"""The TDX guest's event log (ACPI CCEL table + TCG crypto-agile log) and its RTMR replay.

TDVF records every RTMR extension in a TCG PC Client crypto-agile event log (TCG PC Client
Platform Firmware Profile §10: a first `TCG_PCR_EVENT` in SHA-1 form carrying the "Spec ID
Event03" with the digest sizes, then `TCG_PCR_EVENT2` records with one digest per algorithm). The
ACPI CCEL table (UEFI 2.10 / ACPI 6.5 §5.2.34 "CC Event Log ACPI Table") says where the log area
is. In this log the "PCR index" is the CC measurement-register index: 0 = MRTD, 1..4 = RTMR0..3
(UEFI 2.10 §38.4 EFI_CC_MEASUREMENT_PROTOCOL; checked on a real quote, research/attestation.md
§5.3). Replaying `RTMR[i] = SHA-384(RTMR[i] ‖ digest)` from zero over the log must give the
quote's RTMRs; a verifier that trusts the log's events only after that check can read what was
booted.

Unused log area is filled with 0xFF by TDVF; the log ends where only fill (0xFF or 0x00) is left.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contrast.attestation.errors import AttestationPackageError

# ACPI CCEL table (ACPI 6.5 §5.2.34): the 36-byte common header, then these fields.
ACPI_HEADER_SIZE = 36
CCEL_SIGNATURE = b"CCEL"
CCEL_TABLE_SIZE = 56
CC_TYPE_TDX = 2
_ACPI_HEADER = struct.Struct("<4sIBB6s8sI4sI")
_CCEL_BODY = struct.Struct("<BBHQQ")  # CC type, CC subtype, reserved, LAML, LASA

# TCG algorithm identifiers (TCG Algorithm Registry) and their digest sizes.
TPM_ALG_SHA1 = 0x0004
TPM_ALG_SHA256 = 0x000B
TPM_ALG_SHA384 = 0x000C
TPM_ALG_SHA512 = 0x000D
SHA1_SIZE = 20
SHA384_SIZE = 48

# Event types (TCG PC Client PFP §10.4.1) the replay and the predictions name.
EV_NO_ACTION = 0x00000003
EV_SEPARATOR = 0x00000004
EV_EFI_ACTION = 0x80000007

# TCG_PCR_EVENT (SHA-1 form): index u32, type u32, SHA-1 digest, event size u32, event.
_LEGACY_HEADER = struct.Struct(f"<II{SHA1_SIZE}sI")
# TCG_EfiSpecIDEvent: signature, platform class u32, minor/major/errata/uintn size u8, count u32.
SPEC_ID_SIGNATURE = b"Spec ID Event03\x00"
_SPEC_ID = struct.Struct("<16sIBBBBI")
_ALGORITHM = struct.Struct("<HH")
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_EVENT2_HEADER = struct.Struct("<III")  # index, type, digest count

RTMR_COUNT = 4
FIRST_RTMR_INDEX = 1  # CC MR index of RTMR0
# Bounds that keep a corrupt log from asking for absurd allocations or loops.
MAX_ALGORITHMS = 16
MAX_EVENT_SIZE = 16 * 1024 * 1024


class EventLogError(AttestationPackageError):
    """An event log or CCEL table that is malformed (truncated, inconsistent sizes, ...)."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(
            message,
            hint=hint
            or "pass the CCEL table and the log area exactly as the guest exposes them"
            " (/sys/firmware/acpi/tables/CCEL and .../data/CCEL)",
        )


class _Reader:
    def __init__(self, data: bytes, offset: int = 0) -> None:
        self.data = data
        self.offset = offset

    def take(self, size: int, what: str) -> bytes:
        if size < 0 or self.offset + size > len(self.data):
            raise EventLogError(
                f"event log truncated: {what} needs {size} bytes at offset {self.offset},"
                f" {len(self.data) - self.offset} left"
            )
        chunk = self.data[self.offset : self.offset + size]
        self.offset += size
        return chunk

    def unpack(self, layout: struct.Struct, what: str) -> tuple[Any, ...]:
        return layout.unpack(self.take(layout.size, what))

    def u32(self, what: str) -> int:
        value: int = _U32.unpack(self.take(4, what))[0]
        return value

    def only_fill_left(self) -> bool:
        rest = self.data[self.offset :]
        return not rest.strip(b"\xff") or not rest.strip(b"\x00")


@dataclass(frozen=True)
class CcelTable:
    """The ACPI CCEL table: which CC technology, and where its event log lies in guest memory."""

    revision: int
    oem_id: bytes
    oem_table_id: bytes
    oem_revision: int
    creator_id: bytes
    creator_revision: int
    cc_type: int
    cc_subtype: int
    log_area_minimum_length: int  # LAML
    log_area_start_address: int  # LASA

    @classmethod
    def from_bytes(cls, data: bytes) -> CcelTable:
        if len(data) < CCEL_TABLE_SIZE:
            raise EventLogError(f"CCEL table has {len(data)} bytes, needs {CCEL_TABLE_SIZE}")
        (signature, length, revision, _checksum, oem_id, oem_table_id, oem_revision, creator_id,
         creator_revision) = _ACPI_HEADER.unpack_from(data)  # fmt: skip
        if signature != CCEL_SIGNATURE:
            raise EventLogError(f"not a CCEL table (signature {signature!r})")
        if length != len(data) or length != CCEL_TABLE_SIZE:
            raise EventLogError(f"CCEL table length field {length}, table has {len(data)} bytes")
        if sum(data) % 256:
            raise EventLogError("CCEL table checksum does not add up to zero")
        cc_type, cc_subtype, _reserved, laml, lasa = _CCEL_BODY.unpack_from(data, ACPI_HEADER_SIZE)
        return cls(
            revision, oem_id, oem_table_id, oem_revision, creator_id, creator_revision,
            cc_type, cc_subtype, laml, lasa,
        )  # fmt: skip

    def to_bytes(self) -> bytes:
        body = _CCEL_BODY.pack(
            self.cc_type, self.cc_subtype, 0, self.log_area_minimum_length,
            self.log_area_start_address,
        )  # fmt: skip
        header = _ACPI_HEADER.pack(
            CCEL_SIGNATURE, CCEL_TABLE_SIZE, self.revision, 0, self.oem_id, self.oem_table_id,
            self.oem_revision, self.creator_id, self.creator_revision,
        )  # fmt: skip
        table = bytearray(header + body)
        table[9] = (-sum(table)) % 256  # ACPI checksum: all bytes sum to zero
        return bytes(table)

    @property
    def is_tdx(self) -> bool:
        return self.cc_type == CC_TYPE_TDX


@dataclass(frozen=True)
class SpecIdEvent:
    """The log's first event: which digest algorithms each later record carries, and their sizes."""

    platform_class: int
    spec_version: tuple[int, int, int]  # major, minor, errata
    uintn_size: int
    algorithms: tuple[tuple[int, int], ...]  # (TPM_ALG_ID, digest size)
    vendor_info: bytes = b""

    def digest_size(self, algorithm: int) -> int | None:
        return dict(self.algorithms).get(algorithm)

    @classmethod
    def from_bytes(cls, data: bytes) -> SpecIdEvent:
        reader = _Reader(data)
        signature, platform_class, minor, major, errata, uintn, count = reader.unpack(
            _SPEC_ID, "the Spec ID event"
        )
        if signature != SPEC_ID_SIGNATURE:
            raise EventLogError(f"first event is not a 'Spec ID Event03' ({signature!r})")
        if not 0 < count <= MAX_ALGORITHMS:
            raise EventLogError(f"Spec ID event names {count} digest algorithms")
        algorithms = []
        for _ in range(count):
            algorithm, size = reader.unpack(_ALGORITHM, "a digest algorithm")
            if size == 0:
                raise EventLogError(f"digest algorithm {algorithm:#06x} has size 0")
            algorithms.append((algorithm, size))
        if len({algorithm for algorithm, _ in algorithms}) != len(algorithms):
            raise EventLogError("Spec ID event names a digest algorithm twice")
        (vendor_size,) = reader.unpack(_U8, "the vendor info size")
        vendor_info = reader.take(vendor_size, "the vendor info")
        if reader.offset != len(data):
            raise EventLogError("Spec ID event has bytes after its vendor info")
        return cls(platform_class, (major, minor, errata), uintn, tuple(algorithms), vendor_info)

    def to_bytes(self) -> bytes:
        major, minor, errata = self.spec_version
        return (
            _SPEC_ID.pack(
                SPEC_ID_SIGNATURE, self.platform_class, minor, major, errata, self.uintn_size,
                len(self.algorithms),
            )
            + b"".join(_ALGORITHM.pack(algorithm, size) for algorithm, size in self.algorithms)
            + _U8.pack(len(self.vendor_info))
            + self.vendor_info
        )  # fmt: skip


@dataclass(frozen=True)
class Event:
    """One TCG_PCR_EVENT2 record: register index, event type, digests by algorithm, event data."""

    mr_index: int
    event_type: int
    digests: tuple[tuple[int, bytes], ...]
    data: bytes

    def digest(self, algorithm: int = TPM_ALG_SHA384) -> bytes | None:
        return dict(self.digests).get(algorithm)

    @property
    def rtmr(self) -> int | None:
        """The RTMR this event extends (0..3), or None for MRTD and out-of-range indices."""
        rtmr = self.mr_index - FIRST_RTMR_INDEX
        return rtmr if 0 <= rtmr < RTMR_COUNT else None

    def to_bytes(self) -> bytes:
        return (
            _EVENT2_HEADER.pack(self.mr_index, self.event_type, len(self.digests))
            + b"".join(_U16.pack(algorithm) + digest for algorithm, digest in self.digests)
            + _U32.pack(len(self.data))
            + self.data
        )


def _read_event(reader: _Reader, spec: SpecIdEvent) -> Event:
    index, event_type, count = reader.unpack(_EVENT2_HEADER, "an event header")
    if count > len(spec.algorithms):
        raise EventLogError(
            f"event at offset {reader.offset - _EVENT2_HEADER.size} has {count} digests,"
            f" the Spec ID event names {len(spec.algorithms)} algorithms"
        )
    digests = []
    for _ in range(count):
        (algorithm,) = reader.unpack(_U16, "a digest algorithm")
        size = spec.digest_size(algorithm)
        if size is None:
            raise EventLogError(
                f"event digest algorithm {algorithm:#06x} is not in the Spec ID event"
            )
        digests.append((algorithm, reader.take(size, "a digest")))
    data_size = reader.u32("an event size")
    if data_size > MAX_EVENT_SIZE:
        raise EventLogError(f"event claims {data_size} bytes of data")
    return Event(index, event_type, tuple(digests), reader.take(data_size, "event data"))


@dataclass(frozen=True)
class EventLog:
    """A parsed crypto-agile event log: the SHA-1-form header event, its Spec ID, the events."""

    header_index: int
    spec_id: SpecIdEvent
    events: tuple[Event, ...]

    @classmethod
    def from_bytes(cls, data: bytes) -> EventLog:
        reader = _Reader(data)
        index, event_type, _digest, size = reader.unpack(_LEGACY_HEADER, "the first event")
        if event_type != EV_NO_ACTION:
            raise EventLogError(
                f"first event has type {event_type}, expected EV_NO_ACTION (a crypto-agile log)"
            )
        if size > MAX_EVENT_SIZE:
            raise EventLogError(f"first event claims {size} bytes of data")
        spec = SpecIdEvent.from_bytes(reader.take(size, "the Spec ID event"))
        events = []
        while reader.offset < len(data) and not reader.only_fill_left():
            events.append(_read_event(reader, spec))
        return cls(index, spec, tuple(events))

    def to_bytes(self) -> bytes:
        spec = self.spec_id.to_bytes()
        header = _LEGACY_HEADER.pack(self.header_index, EV_NO_ACTION, bytes(SHA1_SIZE), len(spec))
        return header + spec + b"".join(event.to_bytes() for event in self.events)

    def replay(self) -> tuple[bytes, bytes, bytes, bytes]:
        """RTMR0..3 as the log says they were extended (EV_NO_ACTION events extend nothing)."""
        return replay(self.events)


def extend(register: bytes, digest: bytes) -> bytes:
    """TDG.MR.RTMR.EXTEND: the new value of an RTMR extended by a 48-byte digest."""
    if len(register) != SHA384_SIZE or len(digest) != SHA384_SIZE:
        raise EventLogError("RTMR values and digests are 48 bytes (SHA-384)")
    return hashlib.sha384(register + digest).digest()


def replay(events: Sequence[Event]) -> tuple[bytes, bytes, bytes, bytes]:
    """RTMR0..3 from zero over `events`; an extending event without a SHA-384 digest is an error.

    Events for MR index 0 (MRTD is built by the TDX module, never extended from the log) and
    indices past RTMR3 cannot come from a TD's firmware and are refused.
    """
    registers = [bytes(SHA384_SIZE)] * RTMR_COUNT
    for position, event in enumerate(events):
        if event.event_type == EV_NO_ACTION:
            continue
        rtmr = event.rtmr
        if rtmr is None:
            raise EventLogError(
                f"event {position} (type {event.event_type:#x}) names CC MR index"
                f" {event.mr_index}; only 1..4 (RTMR0..3) are extended"
            )
        digest = event.digest(TPM_ALG_SHA384)
        if digest is None:
            raise EventLogError(f"event {position} has no SHA-384 digest")
        registers[rtmr] = extend(registers[rtmr], digest)
    return registers[0], registers[1], registers[2], registers[3]


def read_event_log(table: bytes, log_area: bytes) -> EventLog:
    """The log of a TD from its CCEL table and log area; the area may be longer (LAML)."""
    ccel = CcelTable.from_bytes(table)
    if not ccel.is_tdx:
        raise EventLogError(f"CCEL table is for CC type {ccel.cc_type}, not TDX ({CC_TYPE_TDX})")
    if len(log_area) > ccel.log_area_minimum_length:
        log_area = log_area[: ccel.log_area_minimum_length]
    return EventLog.from_bytes(log_area)
