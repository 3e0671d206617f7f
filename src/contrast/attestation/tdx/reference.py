"""TDX reference values: what an authentic quote must also say to be accepted.

`verify.py` answers "did Intel hardware (or the emulated TEE) produce this quote?";
`validate_quote` answers "is it the TD we expect?": launch measurements (MRTD, RTMRs), TDX module
(MRSEAM), CPU features (XFAM), TD attributes (DEBUG refused unless allowed), the policy hash in
MRCONFIGID, the REPORTDATA binding, and the platform's TCB status from the collateral.

JSON uses the original Contrast manifest's names (research/contrast.md §3.3: `MrTd`, `MrSeam`,
`Rtmrs`, `Xfam`, `MinTCBEvaluationDataNumber`, `AllowedPIIDs`); the names it has no equivalent
for (`TdAttributes`, `AllowDebug`, `MrConfigId`, `ReportData`, `AcceptedTcbStatuses`,
`Emulated`) follow the same style. `MrTd` and `MrSeam` accept one hex string or a list.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from contrast.attestation.errors import AttestationPackageError, Reason, ReferenceMismatch
from contrast.attestation.tdx.tcbstatus import TcbStatus
from contrast.attestation.tdx.verify import VerifiedQuote

MEASUREMENT_SIZE = 48
XFAM_SIZE = 8
TD_ATTRIBUTES_SIZE = 8
REPORT_DATA_SIZE = 64
PIID_SIZE = 16
RTMR_COUNT = 4
DEBUG_BIT = 1  # TUD.DEBUG, bit 0 of TD_ATTRIBUTES
# What Contrast pins for its Kata TDs (research/attestation.md §4.2, contrast.md §3.3).
CONTRAST_XFAM = bytes.fromhex("e702060000000000")
SEPT_VE_DISABLE_ONLY = (1 << 28).to_bytes(TD_ATTRIBUTES_SIZE, "little")


class InvalidReferenceValues(AttestationPackageError):
    """Reference values that cannot be used (wrong sizes, not hex, no MRTD)."""


def _invalid(message: str) -> InvalidReferenceValues:
    return InvalidReferenceValues(f"TDX reference values: {message}")


def _check_size(value: bytes, size: int, what: str) -> bytes:
    if len(value) != size:
        raise _invalid(f"{what} must be {size} bytes, got {len(value)}")
    return value


@dataclass(frozen=True)
class TdxReferenceValues:
    """Everything a TD must match. Unset optional fields (None, empty sets) are not checked."""

    mr_td: frozenset[bytes]
    rtmrs: tuple[bytes | None, bytes | None, bytes | None, bytes | None] = (None, None, None, None)
    mr_seam: frozenset[bytes] = frozenset()
    xfam: bytes | None = None
    td_attributes: bytes | None = None
    allow_debug: bool = False
    # The policy hash: MRCONFIGID, 48 bytes (Contrast: the 32-byte hash ‖ 16 zero bytes).
    mr_config_id: bytes | None = None
    report_data: bytes | None = None
    # Without collateral there is no TCB status, and then only an empty set accepts the quote.
    accepted_tcb_statuses: frozenset[TcbStatus] = frozenset({TcbStatus.UP_TO_DATE})
    min_tcb_evaluation_data_number: int = 0
    allowed_piids: frozenset[bytes] = frozenset()
    # True only for the emulated platform; real reference values never accept emulated quotes.
    emulated: bool = False

    def __post_init__(self) -> None:
        if not self.mr_td:
            raise _invalid("MrTd needs at least one allowed value")
        for value in self.mr_td | self.mr_seam:
            _check_size(value, MEASUREMENT_SIZE, "MrTd/MrSeam")
        if len(self.rtmrs) != RTMR_COUNT:
            raise _invalid(f"Rtmrs needs {RTMR_COUNT} entries (null for unchecked)")
        for rtmr in self.rtmrs:
            if rtmr is not None:
                _check_size(rtmr, MEASUREMENT_SIZE, "an RTMR")
        optional: tuple[tuple[bytes | None, int, str], ...] = (
            (self.xfam, XFAM_SIZE, "Xfam"),
            (self.td_attributes, TD_ATTRIBUTES_SIZE, "TdAttributes"),
            (self.mr_config_id, MEASUREMENT_SIZE, "MrConfigId"),
            (self.report_data, REPORT_DATA_SIZE, "ReportData"),
        )
        for optional_value, size, what in optional:
            if optional_value is not None:
                _check_size(optional_value, size, what)
        for piid in self.allowed_piids:
            _check_size(piid, PIID_SIZE, "a PIID")

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> TdxReferenceValues:
        if not isinstance(document, dict):
            raise _invalid("expected a JSON object")
        rtmrs = document.get("Rtmrs") or [None] * RTMR_COUNT
        if not isinstance(rtmrs, list) or len(rtmrs) != RTMR_COUNT:
            raise _invalid(f"Rtmrs must be a list of {RTMR_COUNT} hex strings or nulls")
        statuses = document.get("AcceptedTcbStatuses", [TcbStatus.UP_TO_DATE.value])
        if not isinstance(statuses, list):
            raise _invalid("AcceptedTcbStatuses must be a list")
        try:
            accepted = frozenset(TcbStatus(status) for status in statuses)
        except ValueError as error:
            raise _invalid(str(error)) from None
        minimum = document.get("MinTCBEvaluationDataNumber", 0)
        if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 0:
            raise _invalid("MinTCBEvaluationDataNumber must be a non-negative integer")
        return cls(
            mr_td=_hex_set(document.get("MrTd"), "MrTd"),
            rtmrs=(
                _optional_hex(rtmrs[0], "Rtmrs[0]"),
                _optional_hex(rtmrs[1], "Rtmrs[1]"),
                _optional_hex(rtmrs[2], "Rtmrs[2]"),
                _optional_hex(rtmrs[3], "Rtmrs[3]"),
            ),
            mr_seam=_hex_set(document.get("MrSeam"), "MrSeam"),
            xfam=_optional_hex(document.get("Xfam"), "Xfam"),
            td_attributes=_optional_hex(document.get("TdAttributes"), "TdAttributes"),
            allow_debug=_boolean(document.get("AllowDebug", False), "AllowDebug"),
            mr_config_id=_optional_hex(document.get("MrConfigId"), "MrConfigId"),
            report_data=_optional_hex(document.get("ReportData"), "ReportData"),
            accepted_tcb_statuses=accepted,
            min_tcb_evaluation_data_number=minimum,
            allowed_piids=_hex_set(document.get("AllowedPIIDs"), "AllowedPIIDs"),
            emulated=_boolean(document.get("Emulated", False), "Emulated"),
        )

    def to_json(self) -> dict[str, Any]:
        def one_or_many(values: frozenset[bytes]) -> str | list[str]:
            ordered = sorted(value.hex() for value in values)
            return ordered[0] if len(ordered) == 1 else ordered

        document: dict[str, Any] = {
            "MrTd": one_or_many(self.mr_td),
            "Rtmrs": [None if rtmr is None else rtmr.hex() for rtmr in self.rtmrs],
            "MrSeam": sorted(value.hex() for value in self.mr_seam),
            "Xfam": None if self.xfam is None else self.xfam.hex(),
            "TdAttributes": None if self.td_attributes is None else self.td_attributes.hex(),
            "AllowDebug": self.allow_debug,
            "MrConfigId": None if self.mr_config_id is None else self.mr_config_id.hex(),
            "ReportData": None if self.report_data is None else self.report_data.hex(),
            "AcceptedTcbStatuses": sorted(str(status) for status in self.accepted_tcb_statuses),
            "MinTCBEvaluationDataNumber": self.min_tcb_evaluation_data_number,
            "AllowedPIIDs": sorted(piid.hex() for piid in self.allowed_piids),
            "Emulated": self.emulated,
        }
        return document


def validate_quote(verified: VerifiedQuote, reference: TdxReferenceValues) -> None:
    """Raise `ReferenceMismatch` naming the first field that differs from `reference`."""
    body = verified.quote.body
    if verified.genuine == reference.emulated:
        raise ReferenceMismatch(
            "root",
            "the emulated TEE's root" if reference.emulated else "the Intel SGX Root CA",
            "the Intel SGX Root CA" if verified.genuine else "the emulated TEE's root",
            reason=Reason.EMULATED_EVIDENCE,
            hint="emulated evidence is only accepted by reference values for the emulated platform",
        )
    if body.debug and not reference.allow_debug:
        raise ReferenceMismatch(
            "TdAttributes.DEBUG",
            "0",
            "1",
            reason=Reason.DEBUG_NOT_ALLOWED,
            hint="the host can read and modify a debug TD; launch it without DEBUG",
        )
    _one_of("MrTd", reference.mr_td, body.mr_td)
    for index, (expected, actual) in enumerate(zip(reference.rtmrs, body.rtmrs, strict=True)):
        _equal(f"Rtmrs[{index}]", expected, actual)
    if reference.mr_seam:
        _one_of("MrSeam", reference.mr_seam, body.mr_seam)
    _equal("Xfam", reference.xfam, body.xfam)
    if reference.td_attributes is not None:
        mask = ~DEBUG_BIT if reference.allow_debug else ~0
        expected_value = int.from_bytes(reference.td_attributes, "little") & mask
        if body.td_attributes_value & mask != expected_value:
            raise ReferenceMismatch(
                "TdAttributes", reference.td_attributes.hex(), body.td_attributes.hex()
            )
    _equal("MrConfigId", reference.mr_config_id, body.mr_config_id)
    _equal("ReportData", reference.report_data, body.report_data)
    if reference.allowed_piids:
        piid = verified.pck.extension.platform_instance_id
        if piid not in reference.allowed_piids:
            raise ReferenceMismatch(
                "AllowedPIIDs",
                ", ".join(sorted(p.hex() for p in reference.allowed_piids)),
                "none" if piid is None else piid.hex(),
            )
    _check_tcb(verified, reference)


def _check_tcb(verified: VerifiedQuote, reference: TdxReferenceValues) -> None:
    accepted = reference.accepted_tcb_statuses
    if not accepted and not reference.min_tcb_evaluation_data_number:
        return
    tcb = verified.tcb
    expected = " or ".join(sorted(str(status) for status in accepted)) or "any"
    if tcb is None:
        raise ReferenceMismatch(
            "TcbStatus",
            expected,
            "unknown (no collateral)",
            reason=Reason.TCB_STATUS_NOT_ACCEPTED,
            hint="pass Intel's TCB info and QE identity for this platform",
        )
    if accepted and tcb.status not in accepted:
        raise ReferenceMismatch(
            "TcbStatus",
            expected,
            str(tcb.status),
            reason=Reason.TCB_STATUS_NOT_ACCEPTED,
            hint="update the platform's firmware and TDX module, or widen the accepted statuses",
        )
    number = tcb.tcb_evaluation_data_number or 0
    if number < reference.min_tcb_evaluation_data_number:
        raise ReferenceMismatch(
            "MinTCBEvaluationDataNumber",
            f">= {reference.min_tcb_evaluation_data_number}",
            str(number),
            reason=Reason.TCB_STATUS_NOT_ACCEPTED,
            hint="fetch current collateral from Intel PCS",
        )


def _one_of(name: str, allowed: Iterable[bytes], actual: bytes) -> None:
    allowed = sorted(allowed)
    if actual not in allowed:
        expected = allowed[0].hex() if len(allowed) == 1 else f"one of {len(allowed)} values"
        raise ReferenceMismatch(name, expected, actual.hex())


def _equal(name: str, expected: bytes | None, actual: bytes) -> None:
    if expected is not None and expected != actual:
        raise ReferenceMismatch(name, expected.hex(), actual.hex())


def _optional_hex(value: Any, what: str) -> bytes | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _invalid(f"{what} must be a hex string")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise _invalid(f"{what} is not hex") from None


def _hex_set(value: Any, what: str) -> frozenset[bytes]:
    if value is None:
        return frozenset()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise _invalid(f"{what} must be a hex string or a list of them")
    result = set()
    for item in items:
        parsed = _optional_hex(item, what)
        if parsed is None:
            raise _invalid(f"{what} has an empty entry")
        result.add(parsed)
    return frozenset(result)


def _boolean(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise _invalid(f"{what} must be true or false")
    return value
