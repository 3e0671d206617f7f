"""The emulated SNP TEE: real-format evidence that only its own roots accept."""

from __future__ import annotations

import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contrast.attestation.certificates import load_certificate, serial_number
from contrast.attestation.emulated.snp import DEFAULT_POLICY, EmulatedSnp
from contrast.attestation.errors import AttestationError, Reason, ReferenceMismatch
from contrast.attestation.snp.certtable import ARK_GUID, ASK_GUID, CertTable
from contrast.attestation.snp.endorsement import Endorsement
from contrast.attestation.snp.reference import SnpReferenceValues, validate_report
from contrast.attestation.snp.report import Product, Report, TcbLayout
from contrast.attestation.snp.trust import GENUINE_AMD_ROOTS
from contrast.attestation.snp.verify import VerifiedReport, verify_evidence
from tests.conftest import load_vectors

NOW = datetime.now(UTC)


@pytest.fixture(scope="module")
def tee_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tee")


@pytest.fixture(scope="module")
def tee(tee_dir: Path) -> EmulatedSnp:
    return EmulatedSnp(tee_dir)


def _verify(tee: EmulatedSnp, report: bytes, certificates: list[bytes]) -> VerifiedReport:
    chain = [load_certificate(c) for c in certificates]
    return verify_evidence(report, chain, now=NOW, roots=tee.roots)


def test_evidence_verifies_with_its_roots(tee: EmulatedSnp) -> None:
    report_data, host_data = bytes(range(64)), b"\x07" * 32
    report, certificates = tee.issue(report_data, host_data)
    assert len(report) == 1184
    verified = _verify(tee, report, certificates)
    claims = verified.claims()
    assert claims["report_data"] == report_data.hex()
    assert claims["host_data"] == host_data.hex()
    assert claims["measurement"] == tee.measurement.hex()
    assert claims["guest_policy"] == DEFAULT_POLICY
    assert claims["product"] == "Milan"
    assert claims["version"] == 3
    assert not verified.report.policy.debug
    validate_report(verified, SnpReferenceValues(measurements=frozenset({tee.measurement})))


def test_evidence_fails_against_genuine_amd_roots(tee: EmulatedSnp) -> None:
    report, certificates = tee.issue(bytes(64))
    chain = [load_certificate(c) for c in certificates]
    with pytest.raises(AttestationError) as caught:
        verify_evidence(report, chain, now=NOW, roots=GENUINE_AMD_ROOTS)
    assert caught.value.reason is Reason.UNTRUSTED_VCEK
    assert not tee.roots.genuine
    assert GENUINE_AMD_ROOTS.genuine


@pytest.mark.parametrize("name", ["snp/oak-milan-v3-cb", "snp/virtee-milan-v2"])
def test_real_reference_values_are_never_met(tee: EmulatedSnp, name: str) -> None:
    vector = next(v for v in load_vectors("snp") if v.name == name)
    real = SnpReferenceValues(
        measurements=frozenset({bytes.fromhex(vector.expected["report"]["measurement"])})
    )
    report, certificates = tee.issue(bytes(64))
    with pytest.raises(ReferenceMismatch) as caught:
        validate_report(_verify(tee, report, certificates), real)
    assert caught.value.field == "TrustedMeasurement"


def test_chosen_measurement_policy_and_vmpl(tee: EmulatedSnp) -> None:
    report, certificates = tee.issue(
        bytes(64), measurement=b"\x05" * 48, policy=DEFAULT_POLICY | 1 << 19, vmpl=2
    )
    verified = _verify(tee, report, certificates)
    assert verified.report.measurement == b"\x05" * 48
    assert verified.report.policy.debug
    assert verified.report.vmpl == 2
    with pytest.raises(ReferenceMismatch) as caught:
        validate_report(verified, SnpReferenceValues(measurements=frozenset({b"\x05" * 48})))
    assert caught.value.reason is Reason.DEBUG_NOT_ALLOWED


def test_bad_sizes_are_refused(tee: EmulatedSnp) -> None:
    for call in (
        lambda: tee.issue(bytes(63)),
        lambda: tee.issue(bytes(64), bytes(31)),
        lambda: tee.issue(bytes(64), measurement=bytes(47)),
    ):
        with pytest.raises(ValueError):  # noqa: PT011
            call()


def test_hierarchy_is_stored_once_with_private_keys_owner_only(
    tee: EmulatedSnp, tee_dir: Path
) -> None:
    directory = tee_dir / "snp" / "milan"
    for key in directory.glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    assert len(list(directory.glob("*.key"))) == 4
    again = EmulatedSnp(tee_dir)
    assert again.vcek_der == tee.vcek_der
    assert again.chip_id == tee.chip_id
    report, certificates = again.issue(bytes(64))
    assert _verify(tee, report, certificates).report.chip_id == tee.chip_id


def test_vcek_looks_like_amds(tee: EmulatedSnp) -> None:
    vcek = tee.vcek
    facts = Endorsement.from_certificate(vcek)
    assert facts.product_name == "Milan-B0"
    assert facts.hw_id is not None
    assert len(facts.hw_id) == 64
    assert facts.tcb == tee.tcb
    assert serial_number(vcek) >= 1
    roots = tee.roots.for_product(Product.MILAN)
    assert roots is not None
    assert roots.ark.subject == roots.ark.issuer
    assert roots.asvk is not None


def test_cert_table_carries_the_chain(tee: EmulatedSnp) -> None:
    table = CertTable.from_bytes(tee.cert_table())
    assert table.signing_certificate == tee.vcek_der
    assert table.get(ASK_GUID)
    assert table.get(ARK_GUID)


@pytest.mark.parametrize("product", [Product.GENOA, Product.TURIN])
def test_other_products(tmp_path: Path, product: Product) -> None:
    tee = EmulatedSnp(tmp_path, product)
    report, certificates = tee.issue(bytes(64))
    verified = _verify(tee, report, certificates)
    assert verified.product is product
    parsed = Report.from_bytes(report)
    expected_layout = TcbLayout.TURIN if product is Product.TURIN else TcbLayout.MILAN_GENOA
    assert parsed.tcb_layout is expected_layout
    if product is Product.TURIN:
        assert verified.claims()["reported_tcb"]["fmc"] == 0
        assert not any(parsed.chip_id[8:])
