"""TDX launch-measurement predictions: TDVF metadata, MRTD, Authenticode, RTMR1/RTMR2.

No real TDVF image or Contrast kernel is available here, so MRTD and the RTMRs are checked on
synthetic inputs against the definitions written out longhand (record bytes built by hand), and
the TDVF metadata reader on the real footer of an edk2 OVMF build (sev-snp-measure's fixture,
which carries TDX metadata too).
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.attestation.tdx.eventlog import extend
from contrast.attestation.tdx.measure import (
    ATTRIBUTE_MR_EXTEND,
    ATTRIBUTE_PAGE_AUG,
    FOOTER_TABLE_GUID,
    TDX_METADATA_OFFSET_GUID,
    MeasurementError,
    PageAddOrder,
    TdvfMetadata,
    TdvfSection,
    TdvfSectionType,
    authenticode_sha384,
    footer_table,
    load_options,
    mrtd,
    patch_kernel_header,
    predict,
    rtmr1_digests,
)

OVMF_SUFFIX = Path(__file__).parents[1] / "snp" / "fixtures" / "ovmf_AmdSev_suffix.bin"
PAGE = 0x1000


def test_reads_the_tdvf_metadata_of_a_real_ovmf_footer() -> None:
    metadata = TdvfMetadata.from_firmware(OVMF_SUFFIX.read_bytes())
    types = [section.section_type for section in metadata.sections]
    assert types == [
        TdvfSectionType.BFV, TdvfSectionType.CFV, TdvfSectionType.TEMP_MEM,
        TdvfSectionType.TEMP_MEM, TdvfSectionType.TD_HOB, TdvfSectionType.TEMP_MEM,
    ]  # fmt: skip
    bfv = metadata.sections[0]
    # The boot firmware volume is measured into MRTD and ends at 4 GiB; the CFV is not.
    assert bfv.extended
    assert not metadata.sections[1].extended
    assert bfv.memory_address + bfv.memory_data_size == 1 << 32
    assert TdvfMetadata.from_bytes(metadata.to_bytes()) == metadata
    # Only the last 4 KiB of the image are here, so the sections' data is not.
    with pytest.raises(MeasurementError, match="outside the firmware"):
        mrtd(OVMF_SUFFIX.read_bytes())


def _footer(entries: list[tuple[uuid.UUID, bytes]]) -> bytes:
    body = b"".join(
        data + struct.pack("<H", len(data) + 18) + guid.bytes_le for guid, data in entries
    )
    size = len(body) + 18
    return body + struct.pack("<H", size) + FOOTER_TABLE_GUID.bytes_le + bytes(0x20)


def _firmware(sections: list[TdvfSection], payload: bytes) -> bytes:
    """payload ‖ metadata ‖ footer table pointing at the metadata."""
    metadata = TdvfMetadata(tuple(sections)).to_bytes()
    tail_without_offset = _footer([(TDX_METADATA_OFFSET_GUID, bytes(4))])
    offset_from_end = len(metadata) + len(tail_without_offset)
    footer = _footer([(TDX_METADATA_OFFSET_GUID, struct.pack("<I", offset_from_end))])
    return payload + metadata + footer


def _record(name: bytes, gpa: int) -> bytes:
    return name + bytes(16 - len(name)) + gpa.to_bytes(8, "little") + bytes(104)


def test_mrtd_follows_page_add_and_mr_extend() -> None:
    payload = bytes(range(256)) * 32  # two pages
    bfv = TdvfSection(0, 2 * PAGE, 0xFFFFE000, 2 * PAGE, TdvfSectionType.BFV, ATTRIBUTE_MR_EXTEND)
    hob = TdvfSection(0, 0, 0x809000, PAGE, TdvfSectionType.TD_HOB, 0)
    aug = TdvfSection(0, 0, 0x900000, 4 * PAGE, TdvfSectionType.PERM_MEM, ATTRIBUTE_PAGE_AUG)
    firmware = _firmware([bfv, hob, aug], payload)
    assert footer_table(firmware)[TDX_METADATA_OFFSET_GUID]

    def extends(page: int) -> bytes:
        return b"".join(
            _record(b"MR.EXTEND", 0xFFFFE000 + page * PAGE + chunk)
            + payload[page * PAGE + chunk : page * PAGE + chunk + 256]
            for chunk in range(0, PAGE, 256)
        )

    adds = [_record(b"MEM.PAGE.ADD", 0xFFFFE000 + page * PAGE) for page in (0, 1)]
    hob_add = _record(b"MEM.PAGE.ADD", 0x809000)
    two_pass = adds[0] + adds[1] + extends(0) + extends(1) + hob_add
    single_pass = adds[0] + extends(0) + adds[1] + extends(1) + hob_add
    assert mrtd(firmware) == hashlib.sha384(two_pass).digest()
    assert mrtd(firmware, order=PageAddOrder.SINGLE_PASS) == hashlib.sha384(single_pass).digest()


def test_mrtd_depends_on_measured_bytes_only() -> None:
    payload = bytearray(b"\x11" * 2 * PAGE)
    bfv = TdvfSection(0, PAGE, 0x1000000, PAGE, TdvfSectionType.BFV, ATTRIBUTE_MR_EXTEND)
    cfv = TdvfSection(PAGE, PAGE, 0x2000000, PAGE, TdvfSectionType.CFV, 0)
    reference = mrtd(_firmware([bfv, cfv], bytes(payload)))
    payload[PAGE + 5] ^= 1  # CFV content: only added, not extended
    assert mrtd(_firmware([bfv, cfv], bytes(payload))) == reference
    payload[5] ^= 1  # BFV content: extended
    assert mrtd(_firmware([bfv, cfv], bytes(payload))) != reference


def test_bad_firmware_is_refused() -> None:
    with pytest.raises(MeasurementError, match="footer table"):
        mrtd(b"\xff" * 8192)
    section = TdvfSection(0, 0, 0x1000, PAGE, TdvfSectionType.TD_HOB, 0)
    good = TdvfMetadata((section,)).to_bytes()
    with pytest.raises(MeasurementError, match="signature"):
        TdvfMetadata.from_bytes(b"XDVF" + good[4:])
    with pytest.raises(MeasurementError, match="length"):
        TdvfMetadata.from_bytes(good[:-1])
    unaligned = TdvfSection(0, 0, 0x1001, PAGE, TdvfSectionType.TD_HOB, 0)
    with pytest.raises(MeasurementError, match="aligned"):
        TdvfMetadata.from_bytes(TdvfMetadata((unaligned,)).to_bytes())
    no_metadata = _footer([(uuid.uuid4(), b"1234")])
    with pytest.raises(MeasurementError, match="no TDX metadata"):
        TdvfMetadata.from_firmware(bytes(PAGE) + no_metadata)


@given(st.binary(max_size=600))
def test_arbitrary_firmware_bytes_give_typed_errors(data: bytes) -> None:
    for candidate in (data, data + _footer([(TDX_METADATA_OFFSET_GUID, data[:4].ljust(4))])):
        with contextlib.suppress(MeasurementError):
            mrtd(candidate)


def _pe(*, certificate: bytes = b"", checksum: int = 0, trailing: bytes = b"") -> bytes:
    """A minimal PE32+ image: headers (0x200), two sections, optional trailing data and a cert."""
    pe_offset = 0x80
    header = bytearray(0x200)
    header[:2] = b"MZ"
    struct.pack_into("<I", header, 0x3C, pe_offset)
    header[pe_offset : pe_offset + 4] = b"PE\0\0"
    optional_size = 112 + 16 * 8
    struct.pack_into("<HH12xHH", header, pe_offset + 4, 0x8664, 2, optional_size, 0x22)
    optional = pe_offset + 24
    struct.pack_into("<H", header, optional, 0x20B)
    struct.pack_into("<I", header, optional + 60, 0x200)  # SizeOfHeaders
    struct.pack_into("<I", header, optional + 64, checksum)
    struct.pack_into("<I", header, optional + 108, 16)  # NumberOfRvaAndSizes
    sections = [b"S" * 0x200, b"T" * 0x400]
    table = optional + optional_size
    pointer = 0x200
    # Listed in reverse file order: Authenticode hashes sections sorted by file offset.
    layout = [(0x200 + 0x200, sections[1]), (0x200, sections[0])]
    for index, (pointer, data) in enumerate(layout):
        struct.pack_into(
            "<8sIIII", header, table + index * 40, b".s", len(data), 0, len(data), pointer
        )
    body = sections[0] + sections[1] + trailing
    cert_offset = 0x200 + len(body)
    if certificate:
        struct.pack_into("<II", header, optional + 112 + 4 * 8, cert_offset, len(certificate))
    return bytes(header) + body + certificate


def test_authenticode_skips_checksum_certificate_directory_and_certificates() -> None:
    plain = _pe(trailing=b"tail")
    signed = _pe(trailing=b"tail", certificate=b"C" * 64, checksum=0x1234)
    header = plain[:0x200]
    optional = 0x80 + 24
    certificate_entry = optional + 112 + 4 * 8
    expected = hashlib.sha384(
        header[: optional + 64]
        + header[optional + 68 : certificate_entry]
        + header[certificate_entry + 8 :]
        + b"S" * 0x200
        + b"T" * 0x400
        + b"tail"
    ).digest()
    assert authenticode_sha384(plain) == expected
    assert authenticode_sha384(signed) == expected
    assert authenticode_sha384(_pe(trailing=b"TAIL")) != expected


def test_not_a_pe_is_refused() -> None:
    with pytest.raises(MeasurementError, match="not a PE"):
        authenticode_sha384(bytes(0x400))
    with pytest.raises(MeasurementError, match="too short"):
        authenticode_sha384(b"MZ")


def test_kernel_header_gets_qemus_values() -> None:
    kernel = bytes(0x2000)
    patched = patch_kernel_header(kernel, 12345)
    assert patched[0x210] == 0xB0
    assert patched[0x211] == 0x81
    assert patched[0x224:0x226] == b"\x00\xfe"
    assert struct.unpack_from("<III", patched, 0x218) == (0x80000000, 12345, 0)
    assert struct.unpack_from("<I", patched, 0x228) == (0x20000,)
    untouched = [i for i in range(len(kernel)) if patched[i] != kernel[i]]
    assert all(0x210 <= i < 0x22C for i in untouched)
    assert patch_kernel_header(kernel, None)[0x218:0x220] == bytes(8)


def test_predicted_rtmrs() -> None:
    kernel = _pe() + bytes(0x1000)
    initrd = b"initrd contents"
    measurements = predict(
        _firmware([TdvfSection(0, 0, 0x1000, PAGE, TdvfSectionType.TD_HOB, 0)], b""),
        kernel, initrd, "console=hvc0 ro",
    )  # fmt: skip
    assert measurements.rtmrs[0] is None
    assert measurements.rtmrs[3] == bytes(48)
    actions = [
        b"Calling EFI Application from Boot Option",
        bytes(4),
        b"Exit Boot Services Invocation",
        b"Exit Boot Services Returned with Success",
    ]
    rtmr1 = bytes(48)
    for digest in [
        authenticode_sha384(patch_kernel_header(kernel, len(initrd))),
        *(hashlib.sha384(a).digest() for a in actions),
    ]:
        rtmr1 = extend(rtmr1, digest)
    assert measurements.rtmrs[1] == rtmr1
    assert rtmr1_digests(kernel, len(initrd))[0] != rtmr1_digests(kernel, None)[0]
    options = "console=hvc0 ro initrd=initrd\0".encode("utf-16-le")
    assert load_options("console=hvc0 ro", with_initrd=True) == options
    rtmr2 = extend(
        extend(bytes(48), hashlib.sha384(options).digest()), hashlib.sha384(initrd).digest()
    )
    assert measurements.rtmrs[2] == rtmr2
    rtmr0 = hashlib.sha384(b"known good boot").digest()
    assert predict(
        _firmware([TdvfSection(0, 0, 0x1000, PAGE, TdvfSectionType.TD_HOB, 0)], b""),
        kernel, None, "x", rtmr0=rtmr0,
    ).rtmrs[0] == rtmr0  # fmt: skip
