"""/dev/tdx_guest: TDX_CMD_GET_REPORT0 with a recorded ioctl and a real TDREPORT."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from contrast.attestation.errors import EvidenceUnavailable, Reason
from contrast.attestation.guest import tdxguest
from contrast.errors import ContrastError
from tests.attestation.guest.fakes import FakeTdxGuest, tdreport
from tests.conftest import require_shared

REPORT_DATA = bytes(range(0x80, 0xC0))


@pytest.fixture(autouse=True)
def _shared() -> None:
    require_shared()


@pytest.fixture
def device(tmp_path: Path) -> Path:
    path = tmp_path / "tdx_guest"
    path.touch()
    return path


def test_ioctl_number_matches_the_kernel_header() -> None:
    assert tdxguest.REPORT_REQUEST_SIZE == 1088
    assert tdxguest.TDX_CMD_GET_REPORT0 == 0xC4405401


def test_get_tdreport_layout(device: Path) -> None:
    fake = FakeTdxGuest()

    result = tdxguest.get_tdreport(REPORT_DATA, device=device, ioctl=fake)

    ((request, argument),) = fake.calls
    assert request == tdxguest.TDX_CMD_GET_REPORT0
    assert len(argument) == 1088
    assert argument[:64] == REPORT_DATA
    assert argument[64:] == bytes(1024)
    assert len(result) == 1024
    assert result[0] == 0x81
    assert result[128:192] == REPORT_DATA
    # Everything but REPORTDATA is the real TDREPORT, unchanged.
    assert result[:128] == tdreport()[:128]
    assert result[192:] == tdreport()[192:]


def test_driver_error(device: Path) -> None:
    fake = FakeTdxGuest(error=OSError(errno.EBUSY, "Device or resource busy"))
    with pytest.raises(EvidenceUnavailable) as raised:
        tdxguest.get_tdreport(REPORT_DATA, device=device, ioctl=fake)
    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "TDX_CMD_GET_REPORT0 failed: Device or resource busy" in str(raised.value)


def test_answer_that_is_no_tdreport(device: Path) -> None:
    fake = FakeTdxGuest(tdreport=bytes(1024))
    with pytest.raises(EvidenceUnavailable) as raised:
        tdxguest.get_tdreport(REPORT_DATA, device=device, ioctl=fake)
    assert "report type 0x00" in str(raised.value)


def test_report_data_length(device: Path) -> None:
    fake = FakeTdxGuest()
    with pytest.raises(ContrastError, match="exactly 64 bytes"):
        tdxguest.get_tdreport(bytes(48), device=device, ioctl=fake)
    assert fake.calls == []
