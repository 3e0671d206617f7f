"""Reference values against real quotes: measurements, debug, policy hash, TCB status."""

from __future__ import annotations

import json

import pytest

from contrast.attestation.errors import Reason, ReferenceMismatch
from contrast.attestation.tdx.reference import (
    InvalidReferenceValues,
    TdxReferenceValues,
    validate_quote,
)
from contrast.attestation.tdx.tcbstatus import TcbStatus
from contrast.attestation.tdx.trust import GENUINE_INTEL_ROOTS
from contrast.attestation.tdx.verify import VerifiedQuote, verify_quote_bytes
from tests.attestation.tdx.vectors import collateral, quote_bytes, valid_at, vector
from tests.conftest import Vector

DEBUG = vector("trustee-quote4-v4-debug")  # DEBUG set, platform UpToDate
CURRENT = vector("phala-b0c06f-v4")  # not debug, UpToDate
NO_LEVEL = vector("trustee-quote5-v5")  # TCB level not supported


def verified(v: Vector, *, with_collateral: bool = True) -> VerifiedQuote:
    return verify_quote_bytes(
        quote_bytes(v),
        now=valid_at(v),
        roots=GENUINE_INTEL_ROOTS,
        collateral=collateral(v) if with_collateral else None,
    )


def matching(v: Vector, **changes: object) -> TdxReferenceValues:
    td = v.expected["td"]
    values: dict[str, object] = {
        "mr_td": frozenset({bytes.fromhex(td["mr_td"])}),
        "rtmrs": tuple(bytes.fromhex(td[f"rtmr{i}"]) for i in range(4)),
        "mr_seam": frozenset({bytes.fromhex(td["mr_seam"])}),
        "xfam": bytes.fromhex(td["xfam"]),
        "td_attributes": bytes.fromhex(td["td_attributes"]),
        "mr_config_id": bytes.fromhex(td["mr_config_id"]),
        "report_data": bytes.fromhex(td["report_data"]),
    }
    values.update(changes)
    return TdxReferenceValues(**values)  # type: ignore[arg-type]


def test_matching_reference_values_accept_an_up_to_date_td() -> None:
    validate_quote(verified(CURRENT), matching(CURRENT))


def test_debug_td_is_refused_by_default() -> None:
    with pytest.raises(ReferenceMismatch) as caught:
        validate_quote(verified(DEBUG), matching(DEBUG))
    assert caught.value.reason is Reason.DEBUG_NOT_ALLOWED
    assert caught.value.field == "TdAttributes.DEBUG"


def test_debug_td_is_accepted_when_allowed() -> None:
    validate_quote(verified(DEBUG), matching(DEBUG, allow_debug=True))


def test_allow_debug_still_checks_the_other_attributes() -> None:
    reference = matching(DEBUG, allow_debug=True, td_attributes=bytes(8))
    with pytest.raises(ReferenceMismatch) as caught:
        validate_quote(verified(DEBUG), reference)
    assert caught.value.field == "TdAttributes"


def test_tcb_level_not_supported_is_not_accepted() -> None:
    with pytest.raises(ReferenceMismatch) as caught:
        validate_quote(verified(NO_LEVEL), matching(NO_LEVEL))
    assert caught.value.reason is Reason.TCB_STATUS_NOT_ACCEPTED
    assert caught.value.actual == "TcbLevelNotSupported"


def test_accepted_statuses_can_be_widened() -> None:
    statuses = frozenset({TcbStatus.UP_TO_DATE, TcbStatus.TCB_LEVEL_NOT_SUPPORTED})
    validate_quote(verified(NO_LEVEL), matching(NO_LEVEL, accepted_tcb_statuses=statuses))


def test_without_collateral_the_tcb_status_is_unknown_and_refused() -> None:
    with pytest.raises(ReferenceMismatch) as caught:
        validate_quote(verified(CURRENT, with_collateral=False), matching(CURRENT))
    assert caught.value.reason is Reason.TCB_STATUS_NOT_ACCEPTED


def test_empty_accepted_statuses_skip_the_tcb_check() -> None:
    reference = matching(CURRENT, accepted_tcb_statuses=frozenset())
    validate_quote(verified(CURRENT, with_collateral=False), reference)


def test_minimum_tcb_evaluation_data_number() -> None:
    validate_quote(verified(CURRENT), matching(CURRENT, min_tcb_evaluation_data_number=17))
    with pytest.raises(ReferenceMismatch) as caught:
        validate_quote(verified(CURRENT), matching(CURRENT, min_tcb_evaluation_data_number=18))
    assert caught.value.field == "MinTCBEvaluationDataNumber"


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("MrTd", {"mr_td": frozenset({bytes(48)})}),
        ("Rtmrs[0]", {"rtmrs": (bytes(48), None, None, None)}),
        ("Rtmrs[3]", {"rtmrs": (None, None, None, b"\1" * 48)}),
        ("MrSeam", {"mr_seam": frozenset({bytes(48)})}),
        ("Xfam", {"xfam": bytes(8)}),
        ("TdAttributes", {"td_attributes": bytes(8)}),
        ("MrConfigId", {"mr_config_id": b"\1" * 48}),
        ("ReportData", {"report_data": bytes(64)}),
        ("AllowedPIIDs", {"allowed_piids": frozenset({bytes(16)})}),
    ],
)
def test_each_field_is_checked(field: str, change: dict[str, object]) -> None:
    with pytest.raises(ReferenceMismatch) as caught:
        validate_quote(verified(CURRENT), matching(CURRENT, **change))
    assert caught.value.field == field
    assert caught.value.reason is Reason.REFERENCE_MISMATCH


def test_any_of_several_mrtds() -> None:
    reference = matching(CURRENT)
    several = frozenset({bytes(48), *reference.mr_td})
    validate_quote(verified(CURRENT), matching(CURRENT, mr_td=several))


def test_allowed_piid_from_the_pck() -> None:
    piid = verified(CURRENT).pck.extension.platform_instance_id
    assert piid is not None
    validate_quote(verified(CURRENT), matching(CURRENT, allowed_piids=frozenset({piid})))


def test_json_round_trip_uses_contrast_names() -> None:
    reference = matching(CURRENT, min_tcb_evaluation_data_number=17)
    document = reference.to_json()
    assert {"MrTd", "Rtmrs", "MrSeam", "Xfam", "MinTCBEvaluationDataNumber"} <= set(document)
    assert TdxReferenceValues.from_json(json.loads(json.dumps(document))) == reference


def test_from_json_accepts_contrast_style_single_values() -> None:
    td = CURRENT.expected["td"]
    reference = TdxReferenceValues.from_json(
        {
            "MrTd": td["mr_td"],
            "Rtmrs": [td[f"rtmr{i}"] for i in range(4)],
            "Xfam": td["xfam"],
            "AcceptedTcbStatuses": ["UpToDate"],
        }
    )
    validate_quote(verified(CURRENT), reference)


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"MrTd": "zz"},
        {"MrTd": "00" * 47},
        {"MrTd": "00" * 48, "Rtmrs": ["00" * 48]},
        {"MrTd": "00" * 48, "Xfam": "00"},
        {"MrTd": "00" * 48, "AcceptedTcbStatuses": ["Great"]},
        {"MrTd": "00" * 48, "AllowDebug": "yes"},
        {"MrTd": "00" * 48, "MinTCBEvaluationDataNumber": -1},
        {"MrTd": ["00" * 48, 5]},
        [],
    ],
)
def test_invalid_reference_values_are_refused(document: object) -> None:
    with pytest.raises(InvalidReferenceValues):
        TdxReferenceValues.from_json(document)  # type: ignore[arg-type]
