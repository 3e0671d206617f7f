"""The report parser: layouts, round trips, and only MalformedEvidence on bad bytes."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.attestation.errors import MalformedEvidence, Reason
from contrast.attestation.snp.report import (
    REPORT_SIZE,
    GuestPolicy,
    PlatformInfo,
    Product,
    Report,
    SignerInfo,
    SigningKey,
    TcbLayout,
    TcbVersion,
)
from tests.conftest import load_vectors

MILAN_V3 = next(v for v in load_vectors("snp") if v.name == "snp/oak-milan-v3-cb")


def test_turin_tcb_layout_matches_the_oak_report() -> None:
    """Oak's Turin report: 00 01 00 02 00 00 00 47 ↔ fmc 0, bl 1, tee 0, snp 2, ucode 0x47."""
    raw = bytes.fromhex("0001000200000047")
    tcb = TcbVersion.from_bytes(raw, TcbLayout.TURIN)
    assert tcb == TcbVersion(bootloader=1, tee=0, snp=2, microcode=0x47, fmc=0)
    assert tcb.to_bytes() == raw
    assert TcbVersion.from_bytes(raw, TcbLayout.MILAN_GENOA) != tcb


def test_milan_tcb_layout() -> None:
    raw = bytes.fromhex("0300000000000873")
    tcb = TcbVersion.from_bytes(raw, TcbLayout.MILAN_GENOA)
    assert (tcb.bootloader, tcb.tee, tcb.snp, tcb.microcode, tcb.fmc) == (3, 0, 8, 0x73, None)
    assert str(tcb) == "bl=3 tee=0 snp=8 ucode=115"


@given(st.binary(min_size=8, max_size=8), st.sampled_from(list(TcbLayout)))
def test_tcb_round_trips(raw: bytes, layout: TcbLayout) -> None:
    assert TcbVersion.from_bytes(raw, layout).to_bytes() == raw


def test_tcb_comparison_is_per_component() -> None:
    high_ucode = TcbVersion(bootloader=1, tee=0, snp=1, microcode=0xFF)
    minimum = TcbVersion(bootloader=2, tee=0, snp=0, microcode=0)
    assert not high_ucode.at_least(minimum)
    assert TcbVersion(bootloader=2, tee=0, snp=0, microcode=0).at_least(minimum)


@pytest.mark.parametrize(
    ("family", "model", "product"),
    [
        (0x19, 0x01, Product.MILAN),
        (0x19, 0x11, Product.GENOA),
        (0x19, 0xA0, Product.GENOA),
        (0x1A, 0x02, Product.TURIN),
        (0x19, 0x50, None),
        (0x17, 0x01, None),
    ],
)
def test_product_from_cpuid(family: int, model: int, product: Product | None) -> None:
    assert Product.from_cpuid(family, model) is product


def test_product_names() -> None:
    assert Product("Milan") is Product.MILAN
    assert Product.from_name("Milan-B0") is Product.MILAN
    assert Product.from_name("Genoa") is Product.GENOA
    assert Product.from_name("Venice") is None


def _v2(chip_id: bytes) -> bytes:
    data = bytearray(REPORT_SIZE)
    struct.pack_into("<I", data, 0, 2)
    data[0x1A0:0x1E0] = chip_id
    data[0x180:0x188] = bytes.fromhex("0001000200000047")
    return bytes(data)


def test_v2_layout_follows_the_chip_id_rule_or_the_product() -> None:
    turin_like = _v2(bytes(range(1, 9)) + bytes(56))
    assert Report.from_bytes(turin_like).tcb_layout is TcbLayout.TURIN
    assert Report.from_bytes(turin_like).reported_tcb.fmc == 0
    assert Report.from_bytes(turin_like, product=Product.MILAN).tcb_layout is TcbLayout.MILAN_GENOA
    assert Report.from_bytes(_v2(bytes(range(64)))).tcb_layout is TcbLayout.MILAN_GENOA
    assert Report.from_bytes(_v2(bytes(64))).tcb_layout is TcbLayout.MILAN_GENOA
    assert Report.from_bytes(_v2(bytes(64))).product is None


@pytest.mark.parametrize("size", [0, 1183, 1185, 4000])
def test_wrong_length_is_malformed_report_length(size: int) -> None:
    with pytest.raises(MalformedEvidence) as caught:
        Report.from_bytes(MILAN_V3.file("report").ljust(size, b"\0")[:size])
    assert caught.value.reason is Reason.MALFORMED_REPORT_LENGTH


@pytest.mark.parametrize("version", [0, 1, 6, 0xFFFFFFFF])
def test_unsupported_version_is_malformed(version: int) -> None:
    data = bytearray(MILAN_V3.file("report"))
    struct.pack_into("<I", data, 0, version)
    with pytest.raises(MalformedEvidence) as caught:
        Report.from_bytes(bytes(data))
    assert caught.value.reason is Reason.MALFORMED_REPORT


@pytest.mark.parametrize("offset", [0x04C, 0x18B, 0x19F, 0x1EB, 0x1EF, 0x1F8, 0x208, 0x29F, 0x330])
def test_reserved_bytes_must_be_zero(offset: int) -> None:
    data = bytearray(MILAN_V3.file("report"))
    data[offset] = 1
    with pytest.raises(MalformedEvidence) as caught:
        Report.from_bytes(bytes(data))
    assert caught.value.reason is Reason.MALFORMED_REPORT
    assert f"{offset:#x}" in str(caught.value) or "reserved" in str(caught.value)


@pytest.mark.parametrize("signer", [0b01000, 0b11000, 0x20, 0x80000000])
def test_reserved_signer_info_is_malformed(signer: int) -> None:
    data = bytearray(MILAN_V3.file("report"))
    struct.pack_into("<I", data, 0x48, signer)
    with pytest.raises(MalformedEvidence) as caught:
        Report.from_bytes(bytes(data))
    assert caught.value.reason is Reason.MALFORMED_REPORT


def test_bit_fields() -> None:
    policy = GuestPolicy(0xB001F)
    assert (policy.abi_major, policy.abi_minor) == (0, 0x1F)
    assert policy.smt
    assert policy.debug
    assert not policy.migrate_ma
    info = PlatformInfo(0x67)
    assert info.smt_enabled
    assert info.tsme_enabled
    assert info.ecc_enabled
    assert info.alias_check_complete
    assert not info.tio_enabled
    signer = SignerInfo.build(SigningKey.VLEK, mask_chip_key=True)
    assert signer == 0b110
    assert signer.signing_key is SigningKey.VLEK
    assert signer.mask_chip_key
    assert not signer.author_key_en


def _report_bytes(version: int, body: bytes) -> bytes:
    """Random content in the fields, zero where the version reserves bytes."""
    data = bytearray(body)
    struct.pack_into("<I", data, 0, version)
    data[0x48:0x4C] = bytes([data[0x48] & 0b11, 0, 0, 0])  # signer: VCEK, random low bits
    for start, end in ((0x4C, 0x50), (0x18B, 0x1A0), (0x1EB, 0x1EC), (0x1EF, 0x1F0)):
        data[start:end] = bytes(end - start)
    data[0x208:0x2A0] = bytes(0x98)
    data[0x330:] = bytes(REPORT_SIZE - 0x330)
    if version < 3:
        data[0x188:0x18B] = bytes(3)
    if version < 5:
        data[0x1F8:0x208] = bytes(16)
    return bytes(data)


@settings(max_examples=200)
@given(st.sampled_from([2, 3, 4, 5]), st.binary(min_size=REPORT_SIZE, max_size=REPORT_SIZE))
def test_well_formed_reports_round_trip(version: int, body: bytes) -> None:
    data = _report_bytes(version, body)
    report = Report.from_bytes(data)
    assert report.to_bytes() == data
    assert report.signed_bytes == data[:0x2A0]
    assert Report.from_bytes(report.to_bytes()) == report


@settings(max_examples=100)
@given(st.sampled_from([2, 3, 4, 5]), st.binary(min_size=REPORT_SIZE, max_size=REPORT_SIZE))
def test_a_parsed_report_is_the_one_its_constructor_makes(version: int, body: bytes) -> None:
    """`from_bytes` puts the fields in place itself: the same values, types and frozenness."""
    parsed = Report.from_bytes(_report_bytes(version, body))
    fields = {field.name: getattr(parsed, field.name) for field in dataclasses.fields(Report)}
    constructed = Report(**fields)
    assert parsed == constructed
    assert hash(parsed) == hash(constructed)
    assert repr(parsed) == repr(constructed)
    assert vars(parsed) == vars(constructed)
    assert all(type(vars(parsed)[n]) is type(vars(constructed)[n]) for n in fields)
    assert type(parsed.policy) is GuestPolicy
    assert type(parsed.platform_info) is PlatformInfo
    assert type(parsed.signer_info) is SignerInfo
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.version = 2  # type: ignore[misc]


@given(st.binary(max_size=2 * REPORT_SIZE))
def test_any_bytes_parse_or_raise_malformed(data: bytes) -> None:
    try:
        report = Report.from_bytes(data)
    except MalformedEvidence as error:
        reason: Reason | None = error.reason
    else:
        reason = None
        assert report.to_bytes() == data
    assert reason in (None, Reason.MALFORMED_REPORT, Reason.MALFORMED_REPORT_LENGTH)


@given(st.binary(min_size=REPORT_SIZE, max_size=REPORT_SIZE))
def test_any_1184_bytes_parse_or_raise_malformed(data: bytes) -> None:
    data = struct.pack("<I", 3) + data[4:]
    try:
        report = Report.from_bytes(data)
    except MalformedEvidence as error:
        reason: Reason | None = error.reason
    else:
        reason = None
        assert report.to_bytes() == data
    assert reason in (None, Reason.MALFORMED_REPORT)
