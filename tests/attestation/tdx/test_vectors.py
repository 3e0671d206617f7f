"""Every TDX conformance vector: its verdict, the claims, and each field expected.json states."""

from __future__ import annotations

import hashlib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from contrast.attestation.certificates import load_certificates
from contrast.attestation.errors import AttestationError, MalformedEvidence, Reason
from contrast.attestation.tdx.collateral import load_collateral
from contrast.attestation.tdx.pck import read_pck_extension
from contrast.attestation.tdx.quote import INTEL_QE_VENDOR_ID, Quote
from contrast.attestation.tdx.trust import GENUINE_INTEL_ROOTS
from contrast.attestation.tdx.verify import verify_quote_bytes
from tests.attestation.tdx.vectors import (
    NEGATIVE,
    TDX_VECTORS,
    VALID,
    collateral,
    expected_tcb_status,
    quote_bytes,
    valid_at,
    vector,
)
from tests.conftest import ATTESTATION_DATA, Vector, require_shared

PARSEABLE = [v for v in TDX_VECTORS if v.expected["expected"] != "malformed_quote"]


def test_vectors_are_present() -> None:
    require_shared()
    assert len(VALID) >= 9
    assert len(NEGATIVE) >= 7


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v.name)
def test_valid_vector_verifies_with_its_claims(vector: Vector) -> None:
    verified = verify_quote_bytes(
        quote_bytes(vector),
        now=valid_at(vector),
        roots=GENUINE_INTEL_ROOTS,
        collateral=collateral(vector),
    )
    claims, td = verified.claims(), vector.expected["td"]
    assert claims == {
        "version": vector.expected["quote"]["version"],
        "mr_td": td["mr_td"],
        "rtmrs": [td[f"rtmr{i}"] for i in range(4)],
        "mr_seam": td["mr_seam"],
        "report_data": td["report_data"],
        "td_attributes": td["td_attributes"],
        "xfam": td["xfam"],
        "mr_config_id": td["mr_config_id"],
        "fmspc": vector.expected["pck"]["fmspc"],
        "tcb_status": expected_tcb_status(vector),
    }
    assert verified.genuine


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v.name)
def test_valid_vector_verifies_without_collateral(vector: Vector) -> None:
    verified = verify_quote_bytes(
        quote_bytes(vector), now=valid_at(vector), roots=GENUINE_INTEL_ROOTS
    )
    assert verified.claims()["tcb_status"] is None
    assert verified.tcb is None


@pytest.mark.parametrize("vector", NEGATIVE, ids=lambda v: v.name)
def test_negative_vector_fails_with_its_reason(vector: Vector) -> None:
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(
            quote_bytes(vector),
            now=valid_at(vector),
            roots=GENUINE_INTEL_ROOTS,
            collateral=collateral(vector),
        )
    assert caught.value.reason == vector.expected["expected"]
    assert caught.value.reason in vector.expected["all_failing_checks"]


@pytest.mark.parametrize(
    "vector", [v for v in VALID if "collateral" in v.expected], ids=lambda v: v.name
)
def test_tcb_status_parts(vector: Vector) -> None:
    named = vector.expected["collateral"]
    verified = verify_quote_bytes(
        quote_bytes(vector),
        now=valid_at(vector),
        roots=GENUINE_INTEL_ROOTS,
        collateral=collateral(vector),
    )
    assert verified.tcb is not None
    platform = named["platform_tcb_status"]
    assert verified.tcb.platform == (
        "TcbLevelNotSupported" if platform == "no matching level" else platform
    )
    assert verified.tcb.module == named.get("tdx_module_status")
    assert verified.tcb.qe == named["qe_identity_status"]
    assert verified.tcb.tcb_evaluation_data_number == named["tcb_evaluation_data_number"]


@pytest.mark.parametrize("vector", PARSEABLE, ids=lambda v: v.name)
def test_parsed_fields_match_expected(vector: Vector) -> None:
    data = quote_bytes(vector)
    quote = Quote.from_bytes(data)
    facts = vector.expected.get("quote")
    if facts is None:  # a negative vector derived from another: only the round trip matters
        assert quote.to_bytes() == data
        return
    header = quote.header
    assert header.version == facts["version"]
    assert header.attestation_key_type == facts["attestation_key_type"]
    assert header.tee_type == int(facts["tee_type"], 16)
    assert header.qe_vendor_id.hex() == facts["qe_vendor_id"] == INTEL_QE_VENDOR_ID.hex()
    assert header.user_data.hex() == facts["header_user_data"]
    assert header.to_bytes()[8:12].hex() == facts["header_bytes_8_to_11"]
    assert quote.body.body_type == facts["body_type"]
    assert quote.body.size == facts["body_size"]
    assert len(quote.signed_bytes) == facts["signed_length"]
    assert len(quote.signature_data.to_bytes()) == facts["signature_data_length"]
    assert len(data) == facts["total_length"]
    assert len(quote.trailing) == facts["trailing_bytes"]
    assert quote.signature_data.certification.type == facts["certification_data_type"]
    qe = quote.signature_data.qe_certification
    assert qe is not None
    assert qe.certification.type == facts["inner_certification_data_type"]
    assert qe.certification.data.endswith(b"\0") == facts["pck_chain_pem_ends_with_nul"]
    assert quote.to_bytes() == data

    td, body = vector.expected["td"], quote.body
    for name in (
        "tee_tcb_svn", "mr_seam", "mr_signer_seam", "seam_attributes", "td_attributes", "xfam",
        "mr_td", "mr_config_id", "mr_owner", "mr_owner_config", "report_data",
    ):  # fmt: skip
        assert getattr(body, name).hex() == td[name], name
    assert [r.hex() for r in body.rtmrs] == [td[f"rtmr{i}"] for i in range(4)]
    assert body.td_attributes_value == int(td["td_attributes_u64"], 16)
    assert body.debug == ("DEBUG" in td["td_attributes_flags"])
    if "tee_tcb_svn2" in td:
        assert body.tee_tcb_svn_2 is not None
        assert body.mr_servicetd is not None
        assert body.tee_tcb_svn_2.hex() == td["tee_tcb_svn2"]
        assert body.mr_servicetd.hex() == td["mr_service_td"]
    else:
        assert body.tee_tcb_svn_2 is None

    report, expected_qe = qe.qe_report, vector.expected["qe_report"]
    assert report.isv_prod_id == expected_qe["isvprodid"]
    assert report.isv_svn == expected_qe["isvsvn"]
    assert report.mr_signer.hex() == expected_qe["mrsigner"]
    assert report.mr_enclave.hex() == expected_qe["mrenclave"]
    assert report.misc_select == int(expected_qe["miscselect"], 16)
    assert report.attributes.hex() == expected_qe["attributes"]
    assert report.report_data.hex() == expected_qe["report_data"]
    assert len(qe.qe_auth_data) == expected_qe["auth_data_length"]
    assert quote.signature_data.attestation_key.hex() == vector.expected["attestation_key"]


@pytest.mark.parametrize(
    "vector", [v for v in PARSEABLE if "pck" in v.expected], ids=lambda v: v.name
)
def test_pck_extension_matches_expected(vector: Vector) -> None:
    quote = Quote.from_bytes(quote_bytes(vector))
    chain_pem = quote.signature_data.pck_chain_pem
    assert chain_pem is not None
    leaf, intermediate, _ = load_certificates(chain_pem)
    extension, facts = read_pck_extension(leaf), vector.expected["pck"]
    assert extension.fmspc.hex() == facts["fmspc"]
    assert extension.pce_id.hex() == facts["pce_id"]
    assert extension.sgx_type == facts["sgx_type"]
    assert extension.tcb.pcesvn == facts["pcesvn"]
    assert list(extension.tcb.sgx_components) == facts["sgx_tcb_components"]
    assert extension.tcb.cpusvn.hex() == facts["cpusvn"]
    assert (extension.platform_instance_id is not None) == facts["has_platform_instance_id"]
    assert hex(leaf.serial_number) == facts["serial"]
    assert (
        hashlib.sha256(intermediate.public_bytes(Encoding.DER)).hexdigest()
        == facts["intermediate_sha256"]
    )


def test_tdreport_fields_equal_the_quote_body() -> None:
    """trustee-azure-td-v4: the 1024-byte TDREPORT the quote was made from (§4.8)."""
    v = vector("trustee-azure-td-v4")
    tdreport = v.file("tdreport")
    body = Quote.from_bytes(quote_bytes(v)).body
    assert tdreport[128:192] == body.report_data
    tee_tcb_info = tdreport[256 : 256 + 239]
    assert tee_tcb_info[8:24] == body.tee_tcb_svn
    assert tee_tcb_info[24:72] == body.mr_seam
    tdinfo = tdreport[512:]
    assert tdinfo[0:8] == body.td_attributes
    assert tdinfo[16:64] == body.mr_td
    assert hashlib.sha384(tee_tcb_info).digest() == tdreport[32:80]


@pytest.mark.parametrize(
    "vector_name", ["phala-b0c06f-v4", "phala-dstack-2024-v4", "phala-90c06f-v5"]
)
def test_dcap_qvl_bundle_gives_the_same_result(vector_name: str) -> None:
    v = vector(vector_name)
    folder = ATTESTATION_DATA / v.expected["collateral"]["collateral_dir"]
    bundle = load_collateral([(folder / "dcap_qvl_collateral.json").read_bytes()])
    assert bundle.tcb_info is not None
    assert bundle.qe_identity is not None
    assert len(bundle.crls) == 2
    verified = verify_quote_bytes(
        quote_bytes(v), now=valid_at(v), roots=GENUINE_INTEL_ROOTS, collateral=bundle
    )
    assert verified.claims()["tcb_status"] == expected_tcb_status(v)


def test_collateral_in_pem_and_hex_forms() -> None:
    v = vector("trustee-quote4-v4-debug")
    folder = ATTESTATION_DATA / "collateral" / "intel" / "gtg-2023-06"
    der = (folder / "pck_crl_platform.der").read_bytes()
    pem = x509.load_der_x509_crl(der).public_bytes(Encoding.PEM)
    hexed = (folder / "root_ca_crl.der").read_bytes().hex().encode() + b"\0"
    bundle = load_collateral([pem, hexed, (folder / "tcb_info.json").read_bytes()])
    assert len(bundle.crls) == 2
    verified = verify_quote_bytes(
        quote_bytes(v), now=valid_at(v), roots=GENUINE_INTEL_ROOTS, collateral=bundle
    )
    assert verified.tcb is not None
    assert verified.tcb.qe is None  # no QE identity given


def test_two_tcb_infos_are_refused() -> None:
    tcb_info = (
        ATTESTATION_DATA / "collateral" / "intel" / "gtg-2023-06" / "tcb_info.json"
    ).read_bytes()
    with pytest.raises(MalformedEvidence) as caught:
        load_collateral([tcb_info, tcb_info])
    assert caught.value.reason is Reason.MALFORMED_COLLATERAL
