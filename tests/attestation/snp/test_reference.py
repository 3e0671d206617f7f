"""Reference values: each rule refuses what it should, and the manifest JSON form round-trips."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from contrast.attestation.certificates import load_certificate, parse_time
from contrast.attestation.errors import Reason, ReferenceMismatch
from contrast.attestation.snp.reference import MinimumTcb, SnpReferenceValues, validate_report
from contrast.attestation.snp.report import PlatformInfo, Product, TcbVersion
from contrast.attestation.snp.trust import GENUINE_AMD_ROOTS
from contrast.attestation.snp.verify import VerifiedReport, verify_evidence
from tests.conftest import load_vectors

VECTORS = {v.name: v for v in load_vectors("snp")}


def _verified(name: str) -> VerifiedReport:
    vector = VECTORS[name]
    return verify_evidence(
        vector.file("report"),
        [load_certificate(vector.file("vcek"))],
        now=parse_time(vector.expected["valid_at"]),
        roots=GENUINE_AMD_ROOTS,
    )


DEBUG = _verified("snp/gsg-milan-v2-debug")  # policy 0xb0000, TCB bl 2 tee 0 snp 5 ucode 68
AZURE = _verified("snp/trustee-milan-v2")  # policy 0x3001f, ID block, platform info 0x1


def _accepting(verified: VerifiedReport, **changes: Any) -> SnpReferenceValues:
    """Reference values the report meets, with `changes` applied."""
    report = verified.report
    base = SnpReferenceValues(
        measurements=frozenset({report.measurement}),
        product=verified.product,
        allow_debug=report.policy.debug,
        minimum_tcb=MinimumTcb(bootloader=report.reported_tcb.bootloader),
    )
    return dataclasses.replace(base, **changes)


def _refusal(verified: VerifiedReport, reference: SnpReferenceValues) -> ReferenceMismatch:
    with pytest.raises(ReferenceMismatch) as caught:
        validate_report(verified, reference)
    return caught.value


def test_matching_values_accept() -> None:
    validate_report(DEBUG, _accepting(DEBUG))
    validate_report(AZURE, _accepting(AZURE, minimum_abi_minor=31))


def test_debug_is_refused_unless_allowed() -> None:
    refusal = _refusal(DEBUG, _accepting(DEBUG, allow_debug=False))
    assert refusal.reason is Reason.DEBUG_NOT_ALLOWED
    assert refusal.field == "GuestPolicy.Debug"


def test_measurement() -> None:
    refusal = _refusal(DEBUG, _accepting(DEBUG, measurements=frozenset({bytes(48)})))
    assert refusal.reason is Reason.REFERENCE_MISMATCH
    assert refusal.field == "TrustedMeasurement"
    assert refusal.actual == DEBUG.report.measurement.hex()
    assert _refusal(DEBUG, _accepting(DEBUG, measurements=frozenset())).expected


def test_low_tcb() -> None:
    for minimum in (MinimumTcb(snp=6), MinimumTcb(microcode=69), MinimumTcb(bootloader=3)):
        refusal = _refusal(DEBUG, _accepting(DEBUG, minimum_tcb=minimum))
        assert refusal.reason is Reason.TCB_TOO_LOW
    validate_report(DEBUG, _accepting(DEBUG, minimum_tcb=MinimumTcb(2, 0, 5, 68)))
    refusal = _refusal(DEBUG, _accepting(DEBUG, minimum_launch_tcb=MinimumTcb(tee=1)))
    assert refusal.field == "MinimumTCB (LAUNCH_TCB)"


def test_host_data_report_data_vmpl_chip_id_and_id_key() -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("HostData", {"host_data": b"\x01" * 32}),
        ("ReportData", {"report_data": bytes(64)}),
        ("VMPL", {"vmpl": 1}),
        ("AllowedChipIDs", {"allowed_chip_ids": frozenset({bytes(64)})}),
        ("TrustedIDKeyDigests", {"trusted_id_key_digests": frozenset({b"\x01" * 48})}),
        ("ProductName", {"product": Product.GENOA}),
    ]
    for field, change in cases:
        refusal = _refusal(DEBUG, _accepting(DEBUG, **change))
        assert refusal.field == field
        assert refusal.reason is Reason.REFERENCE_MISMATCH
    validate_report(
        AZURE,
        _accepting(
            AZURE,
            minimum_abi_minor=31,
            host_data=bytes(32),
            report_data=AZURE.report.report_data,
            allowed_chip_ids=frozenset({AZURE.report.chip_id}),
            trusted_id_key_digests=frozenset({AZURE.report.id_key_digest}),
            vmpl=None,
        ),
    )


def test_guest_policy_rules() -> None:
    assert _refusal(AZURE, _accepting(AZURE, allow_smt=False)).field == "GuestPolicy.SMT"
    refusal = _refusal(AZURE, _accepting(AZURE, require_single_socket=True))
    assert refusal.field == "GuestPolicy.SingleSocket"
    refusal = _refusal(AZURE, _accepting(AZURE, minimum_abi_minor=32))
    assert refusal.field == "GuestPolicy.ABI"
    assert refusal.actual == "0.31"


def test_platform_info_ceilings_and_floors() -> None:
    smt_forbidden = _accepting(AZURE, platform_info_forbidden=PlatformInfo.SMT_EN)
    assert _refusal(AZURE, smt_forbidden).field == "PlatformInfo"
    ecc_required = _accepting(AZURE, platform_info_required=PlatformInfo.ECC_EN)
    assert _refusal(AZURE, ecc_required).field == "PlatformInfo"
    with pytest.raises(ValueError, match="PlatformInfo"):
        SnpReferenceValues(platform_info_required=PlatformInfo.SMT_EN)


def test_mitigation_vector_needs_a_v5_report() -> None:
    refusal = _refusal(DEBUG, _accepting(DEBUG, minimum_mitigation_vector=1))
    assert refusal.reason is Reason.TCB_TOO_LOW
    genoa = _verified("snp/oak-genoa-v5")
    validate_report(genoa, _accepting(genoa, minimum_mitigation_vector=1))
    assert _refusal(genoa, _accepting(genoa, minimum_mitigation_vector=2)).reason is (
        Reason.TCB_TOO_LOW
    )


def test_json_round_trip_with_manifest_names() -> None:
    reference = SnpReferenceValues(
        measurements=frozenset({bytes(range(48))}),
        product=Product.GENOA,
        minimum_tcb=MinimumTcb(bootloader=9, tee=0, snp=23, microcode=72),
        allowed_chip_ids=frozenset({bytes(64)}),
        platform_info_required=PlatformInfo.ECC_EN,
        platform_info_forbidden=PlatformInfo.TSME_EN,
        host_data=b"\x02" * 32,
    )
    data = json.loads(json.dumps(reference.to_json()))
    assert data["ProductName"] == "Genoa"
    assert data["TrustedMeasurement"] == bytes(range(48)).hex()
    assert data["MinimumTCB"] == {
        "BootloaderVersion": 9,
        "TEEVersion": 0,
        "SNPVersion": 23,
        "MicrocodeVersion": 72,
    }
    assert data["GuestPolicy"]["SMT"] is True
    assert data["GuestPolicy"]["Debug"] is False
    assert data["PlatformInfo"]["SMTEnabled"] is True
    assert data["PlatformInfo"]["TSMEEnabled"] is False
    assert data["PlatformInfo"]["ECCEnabled"] is True
    assert SnpReferenceValues.from_json(data) == reference


def test_original_manifest_entry_reads() -> None:
    """The shape of research/contrast.md §3.5 (without Platform, which the manifest layer keeps)."""
    entry = {
        "ProductName": "Genoa",
        "TrustedMeasurement": "ab" * 48,
        "MinimumTCB": {"BootloaderVersion": 9, "TEEVersion": 0, "SNPVersion": 23,
                       "MicrocodeVersion": 72},
        "GuestPolicy": {"ABIMinor": 0, "ABIMajor": 0, "SMT": True, "MigrateMA": False,
                        "Debug": False, "SingleSocket": False},
        "PlatformInfo": {"SMTEnabled": True},
        "MinimumMitigationVector": 0,
        "AllowedChipIDs": [],
    }  # fmt: skip
    reference = SnpReferenceValues.from_json(entry)
    assert reference.measurements == {bytes([0xAB]) * 48}
    assert reference.minimum_tcb.snp == 23
    assert reference.allowed_chip_ids is None
    assert not reference.allow_debug
    assert reference.launch_tcb_minimum == reference.minimum_tcb


@pytest.mark.parametrize(
    "entry",
    [
        {"TrustedMeasurement": "zz"},
        {"TrustedMeasurement": "ab" * 47},
        {"MinimumTCB": {"SNPVersion": 256}},
        {"MinimumTCB": {"SNPVersion": True}},
        {"MinimumTCB": {"Bootloader": 1}},
        {"GuestPolicy": {"Debug": "no"}},
        {"GuestPolicy": {"Debugging": False}},
        {"PlatformInfo": []},
        {"ProductName": "Venice"},
        {"AllowedChipIDs": ["00"]},
        {"VMPL": 4},
        {"Unknown": 1},
        [],
    ],
)
def test_bad_json_names_the_field(entry: Any) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies per field
        SnpReferenceValues.from_json(entry)


def test_tcb_version_type_is_unchanged_by_minimum() -> None:
    tcb = TcbVersion(bootloader=1, tee=0, snp=2, microcode=3, fmc=4)
    assert MinimumTcb(fmc=5).shortfall(tcb) == ["fmc 4 < 5"]
    assert MinimumTcb(fmc=4).shortfall(tcb) == []
