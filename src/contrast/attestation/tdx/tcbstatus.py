"""The TCB status of a TDX platform, as Intel's quote verification library computes it.

Inputs are authenticated already: the SGX components and PCESVN from the PCK certificate,
TEE_TCB_SVN from the signed TD report, the QE's ISVSVN from the PCK-signed QE report, and TCB info
and QE identity whose signatures checked. Steps (Intel SGX/TDX DCAP QVL, `TcbLevelCheck`,
`TdxModuleCheck`, `QuoteVerifier::converge*`; research/attestation.md §4.6):

1. Platform: the first TCB level whose 16 SGX components and PCESVN are all ≤ the PCK's, and whose
   16 TDX components are ≤ TEE_TCB_SVN, skipping components 0 and 1 when TEE_TCB_SVN[1] (the TDX
   module's major version) is non-zero, because the module identity rates those two bytes.
2. TDX module: when TEE_TCB_SVN[1] is non-zero, the identity `TDX_<byte 1 as 2 hex digits>` and its
   first level whose ISVSVN ≤ TEE_TCB_SVN[0]; its status is merged into the platform's.
3. QE: the first QE identity level whose ISVSVN ≤ the QE report's; merged last.

No matching platform level gives `TcbLevelNotSupported` (Intel: STATUS_TCB_NOT_SUPPORTED).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contrast.attestation.tdx.collateral import QeIdentity, TcbInfo


class TcbStatus(StrEnum):
    UP_TO_DATE = "UpToDate"
    SW_HARDENING_NEEDED = "SWHardeningNeeded"
    CONFIGURATION_NEEDED = "ConfigurationNeeded"
    CONFIGURATION_AND_SW_HARDENING_NEEDED = "ConfigurationAndSWHardeningNeeded"
    OUT_OF_DATE = "OutOfDate"
    OUT_OF_DATE_CONFIGURATION_NEEDED = "OutOfDateConfigurationNeeded"
    REVOKED = "Revoked"
    TCB_LEVEL_NOT_SUPPORTED = "TcbLevelNotSupported"


_CONFIGURATION_STATUSES = (
    TcbStatus.CONFIGURATION_NEEDED,
    TcbStatus.CONFIGURATION_AND_SW_HARDENING_NEEDED,
)
_CURRENT_STATUSES = (TcbStatus.UP_TO_DATE, TcbStatus.SW_HARDENING_NEEDED)
TDX_COMPONENTS = 16
_MODULE_VERSION_BYTE = 1
_MODULE_SVN_BYTE = 0


@dataclass(frozen=True)
class TcbEvaluation:
    """The combined status and the parts it came from."""

    status: TcbStatus
    platform: TcbStatus
    module: TcbStatus | None
    qe: TcbStatus | None
    advisory_ids: tuple[str, ...] = ()
    tcb_date: datetime | None = None
    tcb_evaluation_data_number: int | None = None


def evaluate(
    tcb_info: TcbInfo,
    *,
    sgx_components: tuple[int, ...],
    pcesvn: int,
    tee_tcb_svn: bytes,
    qe_identity: QeIdentity | None = None,
    qe_isvsvn: int | None = None,
) -> TcbEvaluation:
    """Rate a platform against (already verified) TCB info and QE identity."""
    skip = 2 if tee_tcb_svn[_MODULE_VERSION_BYTE] > 0 else 0
    platform = TcbStatus.TCB_LEVEL_NOT_SUPPORTED
    advisories: list[str] = []
    tcb_date = None
    for level in tcb_info.tcb_levels:
        if (
            all(
                have >= need
                for have, need in zip(sgx_components, level.sgx_components, strict=True)
            )
            and pcesvn >= level.pcesvn
            and all(
                tee_tcb_svn[index] >= level.tdx_components[index]
                for index in range(skip, TDX_COMPONENTS)
            )
        ):
            platform = level.status
            advisories += level.advisory_ids
            tcb_date = level.tcb_date
            break

    module = None
    if tee_tcb_svn[_MODULE_VERSION_BYTE] > 0 and tcb_info.tdx_module_identities:
        module, module_advisories = _module_status(tcb_info, tee_tcb_svn)
        advisories += module_advisories
    status = platform if module is None else _converge_module(platform, module)

    qe = None
    if qe_identity is not None and qe_isvsvn is not None:
        qe = TcbStatus.OUT_OF_DATE  # Intel: ISVSVN below every level is out of date
        for qe_level in qe_identity.tcb_levels:
            if qe_isvsvn >= qe_level.isvsvn:
                qe = qe_level.status
                advisories += qe_level.advisory_ids
                break
        status = _converge_qe(status, qe)
    return TcbEvaluation(
        status,
        platform,
        module,
        qe,
        tuple(dict.fromkeys(advisories)),
        tcb_date,
        tcb_info.tcb_evaluation_data_number,
    )


def module_identity_id(tee_tcb_svn: bytes) -> str:
    return f"TDX_{tee_tcb_svn[_MODULE_VERSION_BYTE]:02X}"


def _module_status(tcb_info: TcbInfo, tee_tcb_svn: bytes) -> tuple[TcbStatus, tuple[str, ...]]:
    wanted = module_identity_id(tee_tcb_svn)
    identity = next((i for i in tcb_info.tdx_module_identities if i.id.upper() == wanted), None)
    if identity is None:
        return TcbStatus.TCB_LEVEL_NOT_SUPPORTED, ()
    for level in identity.tcb_levels:
        if tee_tcb_svn[_MODULE_SVN_BYTE] >= level.isvsvn:
            return level.status, level.advisory_ids
    return TcbStatus.TCB_LEVEL_NOT_SUPPORTED, ()


def _converge_module(platform: TcbStatus, module: TcbStatus) -> TcbStatus:
    """Intel's `convergeTcbStatusWithTdxModuleStatus`."""
    if platform is TcbStatus.TCB_LEVEL_NOT_SUPPORTED:
        return platform
    if module is TcbStatus.OUT_OF_DATE:
        if platform in _CURRENT_STATUSES:
            return TcbStatus.OUT_OF_DATE
        if platform in _CONFIGURATION_STATUSES:
            return TcbStatus.OUT_OF_DATE_CONFIGURATION_NEEDED
    if module in (TcbStatus.REVOKED, TcbStatus.TCB_LEVEL_NOT_SUPPORTED):
        return module
    return platform


def _converge_qe(platform: TcbStatus, qe: TcbStatus) -> TcbStatus:
    """Intel's `convergeTcbStatusWithQeTcbStatus`."""
    if platform is TcbStatus.TCB_LEVEL_NOT_SUPPORTED:
        return platform
    if qe is TcbStatus.OUT_OF_DATE:
        if platform in _CURRENT_STATUSES:
            return TcbStatus.OUT_OF_DATE
        if platform in _CONFIGURATION_STATUSES:
            return TcbStatus.OUT_OF_DATE_CONFIGURATION_NEEDED
    if qe is TcbStatus.REVOKED:
        return TcbStatus.REVOKED
    return platform
