"""/dev/sev-guest: the exact bytes the driver sees, recorded by a fake ioctl."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from contrast.attestation.errors import EvidenceUnavailable, Reason
from contrast.attestation.guest import ioctl, sevguest
from contrast.errors import ContrastError
from tests.attestation.guest.fakes import (
    FakeSevGuest,
    snp_cert_table,
    snp_report,
    with_report_data,
)
from tests.conftest import require_shared

REPORT_DATA = bytes(range(0x40, 0x80))


@pytest.fixture(autouse=True)
def _shared() -> None:
    require_shared()


@pytest.fixture
def device(tmp_path: Path) -> Path:
    path = tmp_path / "sev-guest"
    path.touch()
    return path


def test_ioctl_numbers_match_the_kernel_headers() -> None:
    assert sevguest.SNP_GET_REPORT == 0xC0205300
    assert sevguest.SNP_GET_EXT_REPORT == 0xC0205302
    assert ioctl.iowr("S", 0x1, 32) == 0xC0205301  # SNP_GET_DERIVED_KEY, for comparison


def test_structure_layouts_match_the_kernel_headers() -> None:
    assert sevguest.GUEST_REQUEST_SIZE == 32
    assert sevguest.EXITINFO2_OFFSET == 24
    assert sevguest.REPORT_REQUEST_SIZE == 96
    assert sevguest.EXT_REPORT_REQUEST_SIZE == 112
    assert sevguest.CERTS_ADDRESS_OFFSET == 96
    assert sevguest.CERTS_LEN_OFFSET == 104
    assert sevguest.RESPONSE_HEADER_SIZE == 32


def test_get_report_layout(device: Path) -> None:
    fake = FakeSevGuest()

    result = sevguest.get_report(REPORT_DATA, vmpl=2, device=device, ioctl=fake)

    (call,) = fake.calls
    assert call.request == sevguest.SNP_GET_REPORT
    assert call.argument_size == 32
    assert call.msg_version == 1
    assert call.exitinfo2 == 0
    assert call.req_data != 0
    assert call.resp_data != 0
    assert call.user_data == REPORT_DATA
    assert call.request_bytes[64:68] == b"\x02\x00\x00\x00"
    assert call.reserved == bytes(28)
    assert result.report == with_report_data(snp_report(), 0x50, REPORT_DATA)
    assert result.certificates is None


def test_extended_report_returns_the_certificate_table(device: Path) -> None:
    table = snp_cert_table()
    fake = FakeSevGuest(host_certificates=table)

    result = sevguest.get_extended_report(REPORT_DATA, device=device, ioctl=fake)

    (call,) = fake.calls
    assert call.request == sevguest.SNP_GET_EXT_REPORT
    assert call.argument_size == 32
    assert call.user_data == REPORT_DATA
    assert call.vmpl == 0
    assert call.certs_len == sevguest.DEFAULT_CERTS_SIZE
    assert call.certs_len % 4096 == 0
    assert call.certs_address != 0
    assert call.request_bytes[108:112] == bytes(4)  # tail padding
    assert result.report[0x50:0x90] == REPORT_DATA
    assert result.certificates is not None
    assert len(result.certificates) == sevguest.DEFAULT_CERTS_SIZE
    assert result.certificates[: len(table)] == table
    assert not any(result.certificates[len(table) :])


def test_too_small_certificate_buffer_is_retried_with_the_returned_length(device: Path) -> None:
    # A host table of just over two pages: the first call must fail with INVALID_LEN.
    table = snp_cert_table().ljust(2 * 4096 + 100, b"\xee")
    fake = FakeSevGuest(host_certificates=table)

    result = sevguest.get_extended_report(REPORT_DATA, device=device, ioctl=fake)

    first, second = fake.calls
    assert first.certs_len == 2 * 4096
    assert second.certs_len == 3 * 4096
    assert second.user_data == REPORT_DATA
    assert result.certificates is not None
    assert result.certificates[: len(table)] == table


def test_host_asking_for_more_than_the_kernel_allows(device: Path) -> None:
    fake = FakeSevGuest(host_certificates=b"\x01" * (sevguest.MAX_CERTS_SIZE + 1))

    with pytest.raises(EvidenceUnavailable) as raised:
        sevguest.get_extended_report(REPORT_DATA, device=device, ioctl=fake)

    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "certificate buffer" in str(raised.value)


def test_extended_report_without_host_certificates(device: Path) -> None:
    result = sevguest.get_extended_report(REPORT_DATA, device=device, ioctl=FakeSevGuest())
    assert result.certificates is None
    assert result.report[0x50:0x90] == REPORT_DATA


def test_firmware_status_is_an_issuer_failure(device: Path) -> None:
    with pytest.raises(EvidenceUnavailable) as raised:
        sevguest.get_report(REPORT_DATA, device=device, ioctl=FakeSevGuest(status=0x16))
    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "status 0x16 (INVALID_PARAM)" in str(raised.value)


def test_wrong_report_size_is_an_issuer_failure(device: Path) -> None:
    with pytest.raises(EvidenceUnavailable) as raised:
        sevguest.get_report(REPORT_DATA, device=device, ioctl=FakeSevGuest(report_size=1000))
    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "1000-byte report" in str(raised.value)


def test_failed_ioctl_reports_firmware_and_vmm_errors(device: Path) -> None:
    fake = FakeSevGuest(fw_error=(2 << 32) | 0x27)

    with pytest.raises(EvidenceUnavailable) as raised:
        sevguest.get_extended_report(REPORT_DATA, device=device, ioctl=fake)

    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "firmware error 0x27, VMM error 0x2" in str(raised.value)
    assert "Input/output error" in str(raised.value)


def test_missing_device(tmp_path: Path) -> None:
    with pytest.raises(EvidenceUnavailable) as raised:
        sevguest.get_report(REPORT_DATA, device=tmp_path / "sev-guest", ioctl=FakeSevGuest())
    assert raised.value.reason is Reason.ISSUER_FAILED
    assert f"cannot open {tmp_path / 'sev-guest'}" in str(raised.value)


@pytest.mark.parametrize("length", [0, 32, 63, 65])
def test_report_data_length(device: Path, length: int) -> None:
    fake = FakeSevGuest()
    with pytest.raises(ContrastError, match="exactly 64 bytes"):
        sevguest.get_report(bytes(length), device=device, ioctl=fake)
    assert fake.calls == []


def test_vmpl_range(device: Path) -> None:
    with pytest.raises(ContrastError, match="VMPL"):
        sevguest.get_report(REPORT_DATA, vmpl=4, device=device, ioctl=FakeSevGuest())


def test_request_structure_matches_ctypes_offsets() -> None:
    request = sevguest.SnpExtReportRequest()
    request.certs_len = 0x11223344
    raw = ctypes.string_at(ctypes.addressof(request), ctypes.sizeof(request))
    assert raw[104:108] == bytes.fromhex("44332211")
