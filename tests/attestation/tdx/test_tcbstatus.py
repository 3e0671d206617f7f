"""Intel's TCB level matching and status merging, on small hand-made TCB infos."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contrast.attestation.tdx.collateral import (
    IsvSvnLevel,
    QeIdentity,
    TcbInfo,
    TcbLevel,
    TdxModule,
)
from contrast.attestation.tdx.tcbstatus import TcbEvaluation, TcbStatus, evaluate

DATE = datetime(2025, 1, 1, tzinfo=UTC)
SGX = (3, 3, 2, 2, 4, 1, 0, 5) + (0,) * 8
TEE = bytes([6, 1, 3]) + bytes(13)  # module 1, SVN 6; byte 2 rated by the platform levels


def level(status: str, *, sgx: tuple[int, ...] = SGX, pcesvn: int = 11, tdx2: int = 3) -> TcbLevel:
    tdx = (99, 99, tdx2) + (0,) * 13  # bytes 0 and 1 are skipped when byte 1 is non-zero
    return TcbLevel(sgx, pcesvn, tdx, DATE, TcbStatus(status), (f"INTEL-SA-{status}",))


def module(*levels: tuple[int, str]) -> TdxModule:
    return TdxModule(
        bytes(48),
        bytes(8),
        b"\xff" * 8,
        "TDX_01",
        tuple(IsvSvnLevel(svn, DATE, TcbStatus(status)) for svn, status in levels),
    )


def tcb_info(*levels: TcbLevel, identities: tuple[TdxModule, ...] = ()) -> TcbInfo:
    return TcbInfo(
        fmspc=bytes(6),
        pce_id=bytes(2),
        issue_date=DATE,
        next_update=DATE,
        tcb_evaluation_data_number=17,
        tdx_module=None,
        tdx_module_identities=identities,
        tcb_levels=levels,
        signed_body=b"",
        signature=b"",
    )


def qe_identity(*levels: tuple[int, str]) -> QeIdentity:
    return QeIdentity(
        issue_date=DATE,
        next_update=DATE,
        miscselect=0,
        miscselect_mask=0,
        attributes=bytes(16),
        attributes_mask=bytes(16),
        mrsigner=bytes(32),
        isvprodid=2,
        tcb_levels=tuple(IsvSvnLevel(svn, DATE, TcbStatus(status)) for svn, status in levels),
        tcb_evaluation_data_number=17,
        signed_body=b"",
        signature=b"",
    )


def rate(
    info: TcbInfo, *, qe: QeIdentity | None = None, tee: bytes = TEE, qe_svn: int = 4
) -> TcbEvaluation:
    return evaluate(
        info,
        sgx_components=SGX,
        pcesvn=11,
        tee_tcb_svn=tee,
        qe_identity=qe,
        qe_isvsvn=qe_svn if qe else None,
    )


def test_first_matching_level_wins() -> None:
    higher = level("UpToDate", sgx=(4, *SGX[1:]))
    result = rate(tcb_info(higher, level("SWHardeningNeeded"), level("OutOfDate", pcesvn=5)))
    assert result.platform is TcbStatus.SW_HARDENING_NEEDED
    assert result.advisory_ids == ("INTEL-SA-SWHardeningNeeded",)


def test_no_matching_level() -> None:
    result = rate(tcb_info(level("UpToDate", pcesvn=12), level("OutOfDate", tdx2=4)))
    assert result.status is TcbStatus.TCB_LEVEL_NOT_SUPPORTED


def test_module_bytes_are_compared_when_the_major_version_is_zero() -> None:
    tee = bytes([6, 0, 3]) + bytes(13)
    assert rate(tcb_info(level("UpToDate")), tee=tee).status is TcbStatus.TCB_LEVEL_NOT_SUPPORTED


@pytest.mark.parametrize(
    ("platform", "module_status", "combined"),
    [
        ("UpToDate", "UpToDate", "UpToDate"),
        ("UpToDate", "OutOfDate", "OutOfDate"),
        ("SWHardeningNeeded", "OutOfDate", "OutOfDate"),
        ("ConfigurationNeeded", "OutOfDate", "OutOfDateConfigurationNeeded"),
        ("ConfigurationAndSWHardeningNeeded", "OutOfDate", "OutOfDateConfigurationNeeded"),
        ("UpToDate", "Revoked", "Revoked"),
        ("OutOfDate", "UpToDate", "OutOfDate"),
    ],
)
def test_module_status_is_merged(platform: str, module_status: str, combined: str) -> None:
    info = tcb_info(level(platform), identities=(module((6, module_status)),))
    result = rate(info)
    assert result.module == module_status
    assert result.status == combined


def test_module_below_every_level_is_not_supported() -> None:
    info = tcb_info(level("UpToDate"), identities=(module((7, "UpToDate")),))
    assert rate(info).status is TcbStatus.TCB_LEVEL_NOT_SUPPORTED


@pytest.mark.parametrize(
    ("platform", "qe_levels", "qe_status", "combined"),
    [
        ("UpToDate", ((4, "UpToDate"),), "UpToDate", "UpToDate"),
        ("UpToDate", ((5, "UpToDate"), (3, "OutOfDate")), "OutOfDate", "OutOfDate"),
        ("ConfigurationNeeded", ((5, "UpToDate"),), "OutOfDate", "OutOfDateConfigurationNeeded"),
        ("UpToDate", ((4, "Revoked"),), "Revoked", "Revoked"),
    ],
)
def test_qe_status_is_merged(
    platform: str, qe_levels: tuple[tuple[int, str], ...], qe_status: str, combined: str
) -> None:
    result = rate(tcb_info(level(platform)), qe=qe_identity(*qe_levels))
    assert result.qe == qe_status
    assert result.status == combined
