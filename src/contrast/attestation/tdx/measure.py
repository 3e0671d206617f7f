"""TDX launch measurements predicted from the guest image: MRTD and RTMR1/RTMR2.

**MRTD** is built by the TDX module while the host adds the TD's initial pages (Intel TDX Module
ABI spec, TDH.MEM.PAGE.ADD and TDH.MR.EXTEND): one SHA-384 over, per added 4 KiB page, a 128-byte
record `"MEM.PAGE.ADD"` ‖ GPA, and per measured 256-byte chunk a 128-byte record `"MR.EXTEND"` ‖ GPA
followed by the chunk. Which pages the host adds, and which it measures, is the TDVF metadata of
the firmware (TDVF Design Guide §11: sections BFV, CFV, TD_HOB, TempMem, ... with the MR.EXTEND
attribute). Research/attestation.md §5.3 describes Contrast's `tools/tdx-measure`: for each
section, all its pages are added first, then its chunks extended (`PageAddOrder.TWO_PASS`). Newer
KVM/QEMU add and extend page by page (`SINGLE_PASS`) **(which order a given host uses is
unconfirmed here; it must be checked against a real MRTD)**. Sections with the PAGE.AUG attribute
are skipped: the TDVF Design Guide has the host add them after launch with TDH.MEM.PAGE.AUG, which
MRTD does not see (Intel's td-shim calculator does the same; research notes Contrast's tool adds
them too, which makes no difference for OVMF, whose metadata has no such section).

**RTMR1** (research §5.3): TDVF measures the kernel QEMU hands it over fw_cfg, whose setup header
QEMU has patched (Linux boot protocol §"The real-mode kernel header"), as its PE/COFF Authenticode
SHA-384 (Microsoft PE/COFF "Authenticode PE image hash", as edk2's `HashPeImage`); then the EFI
actions "Calling EFI Application from Boot Option", the separator, "Exit Boot Services Invocation"
and "Exit Boot Services Returned with Success" (each SHA-384 of its ASCII text; checked on the
COS 113 event log in the shared test data). The patch values are those of Contrast's QEMU, which
loads the initrd at the fixed address 0x80000000 so that the header does not depend on memory size
**(from research; not checked against a real Contrast TD here)**.

**RTMR2**: SHA-384 of the kernel's load options, the UTF-16LE command line with `" initrd=initrd"`
appended when there is an initrd and a UTF-16 NUL (edk2 `X86QemuLoadImageLib`), then SHA-384 of
the initrd **(from research; not checked against a real TD here)**.

**RTMR0** covers the CFV (UEFI variables), TD HOB, QEMU's ACPI tables and boot options; it depends
on the VMM's configuration rather than on the image, and is not predicted here: take it from the
replayed event log of a known-good boot (`eventlog.py`). RTMR3 is zero at boot.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum

from contrast.attestation.errors import AttestationPackageError
from contrast.attestation.tdx.eventlog import SHA384_SIZE, extend

PAGE_SIZE = 0x1000
MR_EXTEND_CHUNK = 0x100
MRTD_RECORD_SIZE = 128
MEM_PAGE_ADD = b"MEM.PAGE.ADD"
MR_EXTEND = b"MR.EXTEND"
GPA_OFFSET = 16  # in a 128-byte MRTD record, after the 16-byte operation name

# OVMF's GUIDed footer table (edk2 OvmfPkg/ResetVector/Ia16/ResetVectorVtf0.asm): its last entry
# ends 0x20 bytes before the end of the image; each entry is data ‖ u16 size ‖ GUID, backwards.
FOOTER_END_OFFSET = 0x20
FOOTER_TABLE_GUID = uuid.UUID("96b582de-1fb2-45f7-baea-a366c55a082d")
TDX_METADATA_OFFSET_GUID = uuid.UUID("e47a6535-984a-4798-865e-4685a7bf8ec2")
_FOOTER_ENTRY = struct.Struct("<H16s")
TDVF_SIGNATURE = b"TDVF"
TDVF_VERSION = 1
_TDVF_DESCRIPTOR = struct.Struct("<4sIII")  # signature, length, version, section count
_TDVF_SECTION = struct.Struct("<IIQQII")
ATTRIBUTE_MR_EXTEND = 0x1
ATTRIBUTE_PAGE_AUG = 0x2
MAX_SECTIONS = 64

# Linux x86 boot protocol setup header fields QEMU writes (Documentation/arch/x86/boot.rst).
SETUP_TYPE_OF_LOADER = 0x210
SETUP_LOADFLAGS = 0x211
SETUP_RAMDISK_IMAGE = 0x218
SETUP_RAMDISK_SIZE = 0x21C
SETUP_HEAP_END_PTR = 0x224
SETUP_CMD_LINE_PTR = 0x228
QEMU_TYPE_OF_LOADER = 0xB0
QEMU_LOADFLAGS = 0x81  # LOADED_HIGH | CAN_USE_HEAP
QEMU_HEAP_END = 0xFE00  # cmdline address − real-mode address − 0x200
QEMU_CMDLINE_ADDRESS = 0x20000
CONTRAST_INITRD_ADDRESS = 0x80000000
MIN_KERNEL_SIZE = 0x1000

# PE/COFF offsets (Microsoft PE format): e_lfanew at 0x3C, then "PE\0\0", the COFF header and the
# optional header, whose CheckSum and data directories Authenticode leaves out.
PE_POINTER_OFFSET = 0x3C
PE_SIGNATURE = b"PE\0\0"
COFF_HEADER_SIZE = 20
PE32_MAGIC = 0x10B
PE32_PLUS_MAGIC = 0x20B
OPTIONAL_CHECKSUM_OFFSET = 64
OPTIONAL_SIZE_OF_HEADERS_OFFSET = 60
# Where NumberOfRvaAndSizes sits and the data directories start, per optional-header magic.
DATA_DIRECTORIES = {PE32_MAGIC: (92, 96), PE32_PLUS_MAGIC: (108, 112)}
CERTIFICATE_TABLE_INDEX = 4
DATA_DIRECTORY_SIZE = 8
SECTION_HEADER_SIZE = 40
SECTION_RAW_DATA_OFFSET = 16  # SizeOfRawData, then PointerToRawData

EFI_CALLING_APPLICATION = b"Calling EFI Application from Boot Option"
EFI_EXIT_BOOT_SERVICES = b"Exit Boot Services Invocation"
EFI_EXIT_BOOT_SERVICES_OK = b"Exit Boot Services Returned with Success"
SEPARATOR = bytes(4)
INITRD_LOAD_OPTION = " initrd=initrd"


class MeasurementError(AttestationPackageError):
    """A firmware or kernel image that cannot be measured (no TDVF metadata, not a PE, ...)."""


class TdvfSectionType(IntEnum):
    """TDVF Design Guide §11.2 section types."""

    BFV = 0
    CFV = 1
    TD_HOB = 2
    TEMP_MEM = 3
    PERM_MEM = 4
    PAYLOAD = 5
    PAYLOAD_PARAM = 6


class PageAddOrder(Enum):
    """In which order the host adds a section's pages and extends MRTD with their chunks."""

    TWO_PASS = "two-pass"  # noqa: S105 (all pages added, then all chunks extended: Contrast)
    SINGLE_PASS = "single-pass"  # noqa: S105 (each page added, then its chunks extended)


@dataclass(frozen=True)
class TdvfSection:
    data_offset: int
    raw_data_size: int
    memory_address: int
    memory_data_size: int
    section_type: int
    attributes: int

    @property
    def extended(self) -> bool:
        return bool(self.attributes & ATTRIBUTE_MR_EXTEND)

    @property
    def page_aug(self) -> bool:
        return bool(self.attributes & ATTRIBUTE_PAGE_AUG)

    @classmethod
    def from_bytes(cls, data: bytes) -> TdvfSection:
        return cls(*_TDVF_SECTION.unpack(data))

    def to_bytes(self) -> bytes:
        return _TDVF_SECTION.pack(
            self.data_offset, self.raw_data_size, self.memory_address, self.memory_data_size,
            self.section_type, self.attributes,
        )  # fmt: skip


@dataclass(frozen=True)
class TdvfMetadata:
    """The TDVF descriptor: which ranges the host adds to the TD, and which it measures."""

    sections: tuple[TdvfSection, ...]

    @classmethod
    def from_bytes(cls, data: bytes) -> TdvfMetadata:
        if len(data) < _TDVF_DESCRIPTOR.size:
            raise MeasurementError("TDVF metadata truncated")
        signature, length, version, count = _TDVF_DESCRIPTOR.unpack_from(data)
        if signature != TDVF_SIGNATURE:
            raise MeasurementError(f"TDVF metadata signature is {signature!r}, not 'TDVF'")
        if version != TDVF_VERSION:
            raise MeasurementError(f"TDVF metadata version {version} is not supported")
        if not 0 < count <= MAX_SECTIONS:
            raise MeasurementError(f"TDVF metadata lists {count} sections")
        expected = _TDVF_DESCRIPTOR.size + count * _TDVF_SECTION.size
        if length != expected or len(data) < expected:
            raise MeasurementError(
                f"TDVF metadata length {length}, {count} sections need {expected}"
            )
        sections = tuple(
            TdvfSection.from_bytes(data[offset : offset + _TDVF_SECTION.size])
            for offset in range(_TDVF_DESCRIPTOR.size, expected, _TDVF_SECTION.size)
        )
        for section in sections:
            if section.memory_address % PAGE_SIZE or section.memory_data_size % PAGE_SIZE:
                raise MeasurementError(
                    f"TDVF section at {section.memory_address:#x} is not page aligned"
                )
            if section.raw_data_size > section.memory_data_size:
                raise MeasurementError(
                    f"TDVF section at {section.memory_address:#x} has more raw data than memory"
                )
        return cls(sections)

    def to_bytes(self) -> bytes:
        length = _TDVF_DESCRIPTOR.size + len(self.sections) * _TDVF_SECTION.size
        header = _TDVF_DESCRIPTOR.pack(TDVF_SIGNATURE, length, TDVF_VERSION, len(self.sections))
        return header + b"".join(section.to_bytes() for section in self.sections)

    @classmethod
    def from_firmware(cls, firmware: bytes) -> TdvfMetadata:
        """The metadata of a TDVF/OVMF image, found through its GUIDed footer table."""
        entry = footer_table(firmware).get(TDX_METADATA_OFFSET_GUID)
        if entry is None or len(entry) < 4:
            raise MeasurementError(
                "the firmware has no TDX metadata entry in its footer table",
                hint="pass a TDX-enabled OVMF (TDVF) image",
            )
        (offset_from_end,) = struct.unpack_from("<I", entry)
        start = len(firmware) - offset_from_end
        if not 0 <= start < len(firmware):
            raise MeasurementError("the TDX metadata offset points outside the firmware")
        return cls.from_bytes(firmware[start:])


def footer_table(firmware: bytes) -> dict[uuid.UUID, bytes]:
    """OVMF's GUIDed footer table: entry data by GUID (GUIDs are stored little-endian)."""
    end = len(firmware) - FOOTER_END_OFFSET
    if end < _FOOTER_ENTRY.size:
        raise MeasurementError("the firmware is too small to carry a footer table")
    size, raw_guid = _FOOTER_ENTRY.unpack_from(firmware, end - _FOOTER_ENTRY.size)
    if uuid.UUID(bytes_le=raw_guid) != FOOTER_TABLE_GUID:
        raise MeasurementError(
            "the firmware has no OVMF footer table", hint="pass an OVMF/TDVF image"
        )
    start = end - size
    if size < _FOOTER_ENTRY.size or start < 0:
        raise MeasurementError("the OVMF footer table size is out of range")
    entries: dict[uuid.UUID, bytes] = {}
    position = end - _FOOTER_ENTRY.size
    while position > start:
        size, raw_guid = _FOOTER_ENTRY.unpack_from(firmware, position - _FOOTER_ENTRY.size)
        entry_start = position - size
        if size < _FOOTER_ENTRY.size or entry_start < start:
            raise MeasurementError("an OVMF footer table entry overruns the table")
        entries[uuid.UUID(bytes_le=raw_guid)] = firmware[
            entry_start : position - _FOOTER_ENTRY.size
        ]
        position = entry_start
    return entries


def _record(operation: bytes, gpa: int) -> bytes:
    record = bytearray(MRTD_RECORD_SIZE)
    record[: len(operation)] = operation
    record[GPA_OFFSET : GPA_OFFSET + 8] = gpa.to_bytes(8, "little")
    return bytes(record)


def mrtd(
    firmware: bytes,
    metadata: TdvfMetadata | None = None,
    *,
    order: PageAddOrder = PageAddOrder.TWO_PASS,
) -> bytes:
    """MRTD of a TD launched with `firmware` (its own TDVF metadata unless given)."""
    metadata = metadata or TdvfMetadata.from_firmware(firmware)
    digest = hashlib.sha384()
    for section in metadata.sections:
        if section.page_aug:
            continue
        if section.data_offset + section.raw_data_size > len(firmware):
            raise MeasurementError(
                f"TDVF section at {section.memory_address:#x} lies outside the firmware image"
            )
        raw = firmware[section.data_offset : section.data_offset + section.raw_data_size]
        content = raw.ljust(section.memory_data_size, b"\0")
        pages = range(section.memory_data_size // PAGE_SIZE)

        def add(page: int, section: TdvfSection = section) -> None:
            digest.update(_record(MEM_PAGE_ADD, section.memory_address + page * PAGE_SIZE))

        def measure(page: int, section: TdvfSection = section, content: bytes = content) -> None:
            if not section.extended:
                return
            for chunk in range(page * PAGE_SIZE, (page + 1) * PAGE_SIZE, MR_EXTEND_CHUNK):
                digest.update(_record(MR_EXTEND, section.memory_address + chunk))
                digest.update(content[chunk : chunk + MR_EXTEND_CHUNK])

        if order is PageAddOrder.TWO_PASS:
            for page in pages:
                add(page)
            for page in pages:
                measure(page)
        else:
            for page in pages:
                add(page)
                measure(page)
    return digest.digest()


def authenticode_sha384(image: bytes) -> bytes:
    """The Authenticode SHA-384 of a PE/COFF image, as edk2's measured boot hashes it.

    Everything but the optional header's CheckSum, the Certificate Table directory entry and the
    attribute certificates; sections in file order; bytes after the last section included.
    """
    if len(image) < PE_POINTER_OFFSET + 4:
        raise MeasurementError("the kernel is too short to be a PE/COFF (EFI stub) image")
    (pe_offset,) = struct.unpack_from("<I", image, PE_POINTER_OFFSET)
    optional = pe_offset + len(PE_SIGNATURE) + COFF_HEADER_SIZE
    if image[pe_offset : pe_offset + 4] != PE_SIGNATURE or optional + 2 > len(image):
        raise MeasurementError(
            "the kernel is not a PE/COFF image", hint="build the kernel with CONFIG_EFI_STUB"
        )
    sections, optional_size = struct.unpack_from("<H12xH", image, pe_offset + 6)
    (magic,) = struct.unpack_from("<H", image, optional)
    if magic not in DATA_DIRECTORIES:
        raise MeasurementError(f"unknown PE optional header magic {magic:#x}")
    count_offset, directories = DATA_DIRECTORIES[magic]
    if optional + directories > len(image):
        raise MeasurementError("the PE optional header is truncated")
    (size_of_headers,) = struct.unpack_from("<I", image, optional + OPTIONAL_SIZE_OF_HEADERS_OFFSET)
    (directory_count,) = struct.unpack_from("<I", image, optional + count_offset)
    if size_of_headers > len(image):
        raise MeasurementError("the PE SizeOfHeaders runs past the end of the image")
    checksum = optional + OPTIONAL_CHECKSUM_OFFSET
    digest = hashlib.sha384(image[:checksum])
    certificate_size = 0
    if directory_count > CERTIFICATE_TABLE_INDEX:
        entry = optional + directories + CERTIFICATE_TABLE_INDEX * DATA_DIRECTORY_SIZE
        digest.update(image[checksum + 4 : entry])
        digest.update(image[entry + DATA_DIRECTORY_SIZE : size_of_headers])
        (_, certificate_size) = struct.unpack_from("<II", image, entry)
    else:
        digest.update(image[checksum + 4 : size_of_headers])
    table = optional + optional_size
    if table + sections * SECTION_HEADER_SIZE > len(image):
        raise MeasurementError("the PE section table is truncated")
    spans = []
    for index in range(sections):
        raw_size, raw_pointer = struct.unpack_from(
            "<II", image, table + index * SECTION_HEADER_SIZE + SECTION_RAW_DATA_OFFSET
        )
        if raw_size:
            if raw_pointer + raw_size > len(image):
                raise MeasurementError(f"PE section {index} runs past the end of the image")
            spans.append((raw_pointer, raw_size))
    hashed = size_of_headers
    for pointer, size in sorted(spans):
        digest.update(image[pointer : pointer + size])
        hashed += size
    trailing_end = len(image) - certificate_size
    if trailing_end > hashed:
        digest.update(image[hashed:trailing_end])
    return digest.digest()


def patch_kernel_header(kernel: bytes, initrd_size: int | None) -> bytes:
    """The bzImage as QEMU hands it to the firmware: setup header fields QEMU fills in.

    Assumes boot protocol ≥ 2.02 with LOADED_HIGH (every EFI-stub kernel) and Contrast's QEMU,
    which puts the initrd at 0x80000000 (research §5.3).
    """
    if len(kernel) < MIN_KERNEL_SIZE:
        raise MeasurementError("the kernel image is too short to be a bzImage")
    patched = bytearray(kernel)
    patched[SETUP_TYPE_OF_LOADER] = QEMU_TYPE_OF_LOADER
    patched[SETUP_LOADFLAGS] = QEMU_LOADFLAGS
    struct.pack_into("<H", patched, SETUP_HEAP_END_PTR, QEMU_HEAP_END)
    struct.pack_into("<I", patched, SETUP_CMD_LINE_PTR, QEMU_CMDLINE_ADDRESS)
    if initrd_size is not None:
        struct.pack_into("<I", patched, SETUP_RAMDISK_IMAGE, CONTRAST_INITRD_ADDRESS)
        struct.pack_into("<I", patched, SETUP_RAMDISK_SIZE, initrd_size)
    return bytes(patched)


def replay_digests(digests: Sequence[bytes]) -> bytes:
    register = bytes(SHA384_SIZE)
    for digest in digests:
        register = extend(register, digest)
    return register


def rtmr1_digests(kernel: bytes, initrd_size: int | None) -> list[bytes]:
    """The events TDVF extends into RTMR1 when it boots `kernel` directly (see module doc)."""
    return [
        authenticode_sha384(patch_kernel_header(kernel, initrd_size)),
        hashlib.sha384(EFI_CALLING_APPLICATION).digest(),
        hashlib.sha384(SEPARATOR).digest(),
        hashlib.sha384(EFI_EXIT_BOOT_SERVICES).digest(),
        hashlib.sha384(EFI_EXIT_BOOT_SERVICES_OK).digest(),
    ]


def load_options(cmdline: str, *, with_initrd: bool) -> bytes:
    """The kernel's UEFI load options as edk2's QEMU loader builds them (UTF-16LE, NUL ended)."""
    text = cmdline + (INITRD_LOAD_OPTION if with_initrd else "")
    return (text + "\0").encode("utf-16-le")


def rtmr2_digests(cmdline: str, initrd: bytes | None) -> list[bytes]:
    """The events the kernel's EFI stub extends into RTMR2: load options, then the initrd."""
    digests = [hashlib.sha384(load_options(cmdline, with_initrd=initrd is not None)).digest()]
    if initrd is not None:
        digests.append(hashlib.sha384(initrd).digest())
    return digests


@dataclass(frozen=True)
class TdxLaunchMeasurements:
    mr_td: bytes
    rtmrs: tuple[bytes | None, bytes, bytes, bytes]  # RTMR0 None: not predicted


def predict(
    firmware: bytes,
    kernel: bytes,
    initrd: bytes | None,
    cmdline: str,
    *,
    rtmr0: bytes | None = None,
    order: PageAddOrder = PageAddOrder.TWO_PASS,
) -> TdxLaunchMeasurements:
    """MRTD and RTMR1–3 of a direct-boot TD; RTMR0 only as given (from a known-good boot)."""
    if rtmr0 is not None and len(rtmr0) != SHA384_SIZE:
        raise MeasurementError("RTMR0 must be 48 bytes")
    rtmr1 = replay_digests(rtmr1_digests(kernel, None if initrd is None else len(initrd)))
    rtmr2 = replay_digests(rtmr2_digests(cmdline, initrd))
    return TdxLaunchMeasurements(
        mr_td=mrtd(firmware, order=order),
        rtmrs=(rtmr0, rtmr1, rtmr2, bytes(SHA384_SIZE)),
    )
