"""configfs-tsm against a fake kernel on plain files."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.attestation.errors import EvidenceUnavailable, Reason
from contrast.attestation.evidence import Tee
from contrast.attestation.guest import configfs
from contrast.errors import ContrastError
from tests.attestation.guest.fakes import (
    TDX_QUOTE_REPORT_DATA_OFFSET,
    FakeTsmKernel,
    snp_cert_table,
    snp_report,
    tdx_quote,
    with_report_data,
)
from tests.conftest import require_shared

REPORT_DATA = bytes(range(64))


@pytest.fixture(autouse=True)
def _shared() -> None:
    require_shared()


def test_snp_report_and_certificate_table(tmp_path: Path) -> None:
    table = snp_cert_table()
    kernel = FakeTsmKernel(auxblob=table)

    report = configfs.get_report(REPORT_DATA, root=tmp_path, filesystem=kernel)

    assert report.provider == "sev_guest"
    assert report.platform is Tee.SNP
    assert report.outblob == with_report_data(snp_report(), 0x50, REPORT_DATA)
    assert report.auxblob == table
    assert kernel.writes == [("inblob", REPORT_DATA)]
    assert kernel.made[0].name.startswith(configfs.ENTRY_PREFIX)


def test_tdx_quote_has_no_auxblob(tmp_path: Path) -> None:
    kernel = FakeTsmKernel(
        provider="tdx_guest",
        evidence=tdx_quote(),
        report_data_offset=TDX_QUOTE_REPORT_DATA_OFFSET,
        auxblob=None,
    )

    report = configfs.get_report(REPORT_DATA, root=tmp_path, filesystem=kernel)

    assert report.platform is Tee.TDX
    assert report.outblob == with_report_data(
        tdx_quote(), TDX_QUOTE_REPORT_DATA_OFFSET, REPORT_DATA
    )
    assert report.auxblob is None


def test_empty_auxblob_means_no_certificates(tmp_path: Path) -> None:
    report = configfs.get_report(REPORT_DATA, root=tmp_path, filesystem=FakeTsmKernel())
    assert report.auxblob is None


def test_privlevel_is_written_and_counted(tmp_path: Path) -> None:
    kernel = FakeTsmKernel()

    configfs.get_report(REPORT_DATA, root=tmp_path, privlevel=2, filesystem=kernel)

    # Two writes move the generation by two; the read still matches, so no retry happened.
    assert kernel.writes == [("inblob", REPORT_DATA), ("privlevel", b"2")]
    assert len(kernel.made) == 1


def test_entry_is_removed_after_success(tmp_path: Path) -> None:
    kernel = FakeTsmKernel()
    configfs.get_report(REPORT_DATA, root=tmp_path, filesystem=kernel)
    assert kernel.removed == kernel.made
    assert list(tmp_path.iterdir()) == []


def test_concurrent_writer_is_detected_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kernel = FakeTsmKernel(concurrent_writes=1)

    with caplog.at_level(logging.WARNING, logger=configfs.__name__):
        report = configfs.get_report(REPORT_DATA, root=tmp_path, filesystem=kernel)

    assert report.outblob[0x50:0x90] == REPORT_DATA
    assert len(kernel.made) == 2
    assert kernel.made[0] != kernel.made[1]
    assert kernel.removed == kernel.made
    assert "generation 2, expected 1" in caplog.text


def test_persistent_concurrent_writer_fails_after_the_attempts(tmp_path: Path) -> None:
    kernel = FakeTsmKernel(concurrent_writes=10)

    with pytest.raises(EvidenceUnavailable) as raised:
        configfs.get_report(REPORT_DATA, root=tmp_path, filesystem=kernel, attempts=3)

    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "another process kept writing" in str(raised.value)
    assert "3 attempts" in str(raised.value)
    assert len(kernel.made) == 3
    assert list(tmp_path.iterdir()) == []


def test_missing_provider_means_no_tee(tmp_path: Path) -> None:
    kernel = FakeTsmKernel(provider=None)

    with pytest.raises(EvidenceUnavailable) as raised:
        configfs.get_report(REPORT_DATA, root=tmp_path, filesystem=kernel)

    assert raised.value.reason is Reason.NO_TEE
    assert "no provider" in str(raised.value)
    assert kernel.writes == []
    assert list(tmp_path.iterdir()) == []


def test_unknown_provider_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EvidenceUnavailable) as raised:
        configfs.get_report(
            REPORT_DATA, root=tmp_path, filesystem=FakeTsmKernel(provider="arm_cca_guest")
        )
    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "'arm_cca_guest' is not supported" in str(raised.value)


def test_provider_error_is_reported_and_entry_removed(tmp_path: Path) -> None:
    kernel = FakeTsmKernel(outblob_error=OSError(errno.EIO, "Input/output error"))

    with pytest.raises(EvidenceUnavailable) as raised:
        configfs.get_report(REPORT_DATA, root=tmp_path, filesystem=kernel)

    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "sev_guest" in str(raised.value)
    assert "Input/output error" in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_unreadable_generation_is_an_issuer_failure(tmp_path: Path) -> None:
    class GarbledGeneration(FakeTsmKernel):
        def make_entry(self, root: Path) -> Path:
            entry = super().make_entry(root)
            (entry / "generation").write_text("many\n")
            return entry

    with pytest.raises(EvidenceUnavailable) as raised:
        configfs.get_report(REPORT_DATA, root=tmp_path, filesystem=GarbledGeneration())
    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "generation" in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_entry_that_cannot_be_created(tmp_path: Path) -> None:
    root = tmp_path / "report"
    root.write_bytes(b"")  # a file, not a directory: mkdir inside it fails even for root

    with pytest.raises(EvidenceUnavailable) as raised:
        configfs.get_report(REPORT_DATA, root=root, filesystem=FakeTsmKernel())

    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "cannot create a configfs-tsm report entry" in str(raised.value)


@given(st.binary(max_size=128).filter(lambda data: len(data) != 64))
def test_report_data_must_be_64_bytes(report_data: bytes) -> None:
    # No filesystem access happens: the root does not even exist.
    with pytest.raises(ContrastError, match="exactly 64 bytes"):
        configfs.get_report(report_data, root=Path("/nonexistent/tsm/report"))


def test_available_looks_for_the_directory(tmp_path: Path) -> None:
    assert configfs.available(tmp_path)
    assert not configfs.available(tmp_path / "missing")
