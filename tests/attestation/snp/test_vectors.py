"""Every SNP conformance vector: parsed fields and the verdict, as expected.json states them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from contrast.attestation.certificates import load_certificate, load_certificates, parse_time
from contrast.attestation.errors import AttestationError
from contrast.attestation.snp.endorsement import Endorsement
from contrast.attestation.snp.report import Product, Report, SigningKey, TcbLayout, TcbVersion
from contrast.attestation.snp.trust import GENUINE_AMD_ROOTS
from contrast.attestation.snp.verify import verify_evidence
from tests.conftest import Vector, expected_snp_claims, load_vectors

VECTORS = load_vectors("snp")
WITH_REPORT_FACTS = [v for v in VECTORS if "report" in v.expected]
WITH_LEAF_FACTS = [v for v in VECTORS if "leaf_certificate" in v.expected]
VERIFIABLE = [
    v
    for v in VECTORS
    if "report" in v.expected["files"] and v.expected["expected"] != "unverifiable"
]


def test_vectors_are_present() -> None:
    assert len(VERIFIABLE) >= 20
    assert any(v.expected["expected"] == "unverifiable" for v in VECTORS)


def _tcb(expected: dict[str, Any], layout: TcbLayout) -> TcbVersion:
    return TcbVersion(
        bootloader=expected["bl"],
        tee=expected["tee"],
        snp=expected["snp"],
        microcode=expected["ucode"],
        fmc=expected.get("fmc", 0) if layout is TcbLayout.TURIN else None,
    )


def _parse(vector: Vector) -> Report:
    facts = vector.expected["report"]
    product = Product(facts["product"]) if facts["cpuid"] is None else None
    return Report.from_bytes(vector.file("report"), product=product)


@pytest.mark.parametrize("vector", WITH_REPORT_FACTS, ids=lambda v: v.name)
def test_report_fields(vector: Vector) -> None:
    facts = vector.expected["report"]
    report = _parse(vector)
    assert report.version == facts["version"]
    assert report.tcb_layout == TcbLayout(facts["tcb_layout"])
    if facts["cpuid"] is None:
        assert report.cpuid is None
        assert report.product is None
    else:
        assert report.cpuid is not None
        assert report.cpuid.family == int(facts["cpuid"]["family"], 16)
        assert report.cpuid.model == int(facts["cpuid"]["model"], 16)
        assert report.cpuid.stepping == int(facts["cpuid"]["stepping"], 16)
        assert report.product == Product(facts["product"])
    assert report.signing_key == SigningKey[facts["signing_key"]]
    assert report.signer_info == int(facts["signer_info"], 16)
    assert report.signer_info.author_key_en == facts["author_key_en"]
    assert report.signer_info.mask_chip_key == facts["mask_chip_key"]
    assert report.guest_svn == facts["guest_svn"]
    assert report.policy == int(facts["policy"], 16)
    assert report.vmpl == facts["vmpl"]
    assert report.signature_algo == facts["signature_algo"]
    assert report.platform_info == int(facts["platform_info"], 16)
    for name in (
        "measurement",
        "report_data",
        "host_data",
        "family_id",
        "image_id",
        "id_key_digest",
        "author_key_digest",
        "report_id",
        "report_id_ma",
        "chip_id",
    ):
        assert getattr(report, name).hex() == facts[name], name
    for name in ("current_tcb", "reported_tcb", "committed_tcb", "launch_tcb"):
        tcb: TcbVersion = getattr(report, name)
        assert tcb.to_bytes().hex() == facts[name]["raw"], name
        assert tcb == _tcb(facts[name], report.tcb_layout), name
    assert str(report.current) == facts["current_firmware"]
    assert str(report.committed) == facts["committed_firmware"]
    if "launch_mit_vector" in facts:
        assert report.launch_mit_vector == int(facts["launch_mit_vector"], 16)
        assert report.current_mit_vector == int(facts["current_mit_vector"], 16)
    else:
        assert report.launch_mit_vector is None
        assert report.current_mit_vector is None


@pytest.mark.parametrize("vector", WITH_REPORT_FACTS, ids=lambda v: v.name)
def test_report_round_trips_exactly(vector: Vector) -> None:
    data = vector.file("report")
    report = _parse(vector)
    assert report.to_bytes() == data
    assert report.signed_bytes == data[:0x2A0]


@pytest.mark.parametrize("vector", WITH_LEAF_FACTS, ids=lambda v: v.name)
def test_endorsement_extensions(vector: Vector) -> None:
    facts = vector.expected["leaf_certificate"]
    certificate = load_certificate(vector.file("vcek"))
    endorsement = Endorsement.from_certificate(certificate)
    assert endorsement.kind is SigningKey.VCEK
    assert endorsement.product_name == facts["product_name"]
    assert endorsement.product == Product.from_name(facts["product_name"])
    assert endorsement.struct_version == facts["struct_version"]
    assert endorsement.hw_id is not None
    assert endorsement.hw_id.hex() == facts["hw_id"]
    assert endorsement.csp_id is None
    tcb = endorsement.tcb
    assert (tcb.bootloader, tcb.tee, tcb.snp, tcb.microcode) == (
        facts["blSPL"],
        facts["teeSPL"],
        facts["snpSPL"],
        facts["ucodeSPL"],
    )
    assert tcb.fmc == facts.get("fmcSPL")
    assert endorsement.fingerprint.hex() == facts["sha256_der"]


def test_turin_vcek_uses_the_turin_layout() -> None:
    vector = next(v for v in VECTORS if v.name == "snp/virtee-turin-vcek-only")
    endorsement = Endorsement.from_certificate(load_certificate(vector.file("vcek")))
    assert endorsement.product is Product.TURIN
    assert endorsement.tcb.layout is TcbLayout.TURIN
    assert endorsement.tcb.to_bytes() == bytes([0, 0, 0, 0, 0, 0, 0, 9])
    assert endorsement.hw_id is not None
    assert len(endorsement.hw_id) == 8


@pytest.mark.parametrize(
    "name", ["snp/neg-trustee-fake-vcek-legacy", "snp/neg-trustee-fake-vcek-new"]
)
def test_hw_id_raw_and_octet_string_read_alike(name: str) -> None:
    vector = next(v for v in VECTORS if v.name == name)
    endorsement = Endorsement.from_certificate(load_certificate(vector.file("vcek")))
    assert endorsement.hw_id == bytes(range(64))


def test_turin_vcek_chains_to_the_turin_ask() -> None:
    vector = next(v for v in VECTORS if v.name == "snp/virtee-turin-vcek-only")
    certificate = load_certificate(vector.file("vcek"))
    turin = GENUINE_AMD_ROOTS.for_product(Product.TURIN)
    certificate.verify_directly_issued_by(turin.ask)
    assert load_certificates(vector.shared_file(vector.expected["intermediate"]))[0] == turin.ask


def _verify(vector: Vector, now: datetime | None = None) -> Any:
    product = vector.expected.get("verify_with", {}).get("product")
    return verify_evidence(
        vector.file("report"),
        [load_certificate(vector.file("vcek"))],
        now=now or parse_time(vector.expected["valid_at"]),
        roots=GENUINE_AMD_ROOTS,
        product=Product(product) if product else None,
    )


@pytest.mark.parametrize("vector", VERIFIABLE, ids=lambda v: v.name)
def test_verdict(vector: Vector) -> None:
    expected = vector.expected["expected"]
    if expected != "valid":
        with pytest.raises(AttestationError) as caught:
            _verify(vector)
        assert caught.value.reason == expected
        assert caught.value.reason in vector.expected["all_failing_checks"]
        return
    verified = _verify(vector)
    facts = vector.expected["report"]
    claims = verified.claims()
    assert claims == expected_snp_claims(facts)
    assert (
        verified.endorsement.fingerprint.hex() == vector.expected["leaf_certificate"]["sha256_der"]
    )
