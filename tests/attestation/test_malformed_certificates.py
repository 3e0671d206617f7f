"""Malformed certificates and CRLs are invalid evidence with a reason, never a crash (issue 11).

`cryptography` parses most fields of a certificate or CRL only when they are first read, so a VCEK
with an extension listed twice, an X.509 version that does not exist or a name that does not
decode used to pass loading and blow up deep inside a verifier as `DuplicateExtension`,
`InvalidVersion` or `ValueError`. The real vectors are edited inside their DER structure, so each
edit reaches exactly the field it names.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.attestation.certificates import signature_unused_bits
from contrast.attestation.errors import Reason
from contrast.attestation.verdict import verify_snp, verify_tdx
from contrast.cli.main import main
from tests.attestation.dermutations import (
    parse,
    structural_mutations,
    with_duplicate_extension,
    with_undecodable_name,
    with_version,
)
from tests.attestation.tdx.vectors import collateral_paths, quote_bytes, valid_at, vector
from tests.conftest import ATTESTATION_DATA

SNP = ATTESTATION_DATA / "snp" / "oak-milan-v3-cb"
REPORT = (SNP / "report.bin").read_bytes()
VCEK = (SNP / "vcek.der").read_bytes()
MILAN = ATTESTATION_DATA / "roots" / "amd" / "milan"
ASK, ARK = (MILAN / "ask.pem").read_bytes(), (MILAN / "ark.pem").read_bytes()
SNP_NOW = datetime(2025, 2, 4, tzinfo=UTC)

TDX = vector("trustee-quote4-v4-debug")
QUOTE = quote_bytes(TDX)
COLLATERAL = {path.name: path.read_bytes() for path in collateral_paths(TDX)}
TDX_NOW = valid_at(TDX)

CERTIFICATE_MALFORMATIONS: dict[str, Callable[[bytes], bytes]] = {
    "duplicate extension": with_duplicate_extension,
    "unknown version": lambda der: with_version(der, 5),
    "undecodable subject": with_undecodable_name,
}


def test_the_vectors_verify_as_they_are() -> None:
    assert verify_snp(REPORT, endorsements=[VCEK], now=SNP_NOW).valid
    assert verify_tdx(QUOTE, collateral=list(COLLATERAL.values()), now=TDX_NOW).valid


@pytest.mark.parametrize("malformation", CERTIFICATE_MALFORMATIONS)
def test_a_malformed_vcek_is_invalid_evidence(malformation: str) -> None:
    vcek = CERTIFICATE_MALFORMATIONS[malformation](VCEK)
    verdict = verify_snp(REPORT, endorsements=[vcek], now=SNP_NOW)
    assert verdict.reason is Reason.MALFORMED_CERTIFICATE, verdict
    assert verdict.detail is not None
    assert verdict.detail.startswith("SNP endorsement")


@pytest.mark.parametrize("crl", ["root_ca_crl.der", "pck_crl_platform.der"])
def test_a_crl_whose_issuer_does_not_decode_is_invalid_collateral(crl: str) -> None:
    collateral = dict(COLLATERAL)
    collateral[crl] = with_undecodable_name(collateral[crl], "crl")
    verdict = verify_tdx(QUOTE, collateral=list(collateral.values()), now=TDX_NOW)
    assert verdict.reason is Reason.MALFORMED_COLLATERAL, verdict


@pytest.mark.parametrize("malformation", CERTIFICATE_MALFORMATIONS)
def test_evidence_verify_prints_one_verdict_for_a_malformed_vcek(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, malformation: str
) -> None:
    vcek = tmp_path / "vcek.der"
    vcek.write_bytes(CERTIFICATE_MALFORMATIONS[malformation](VCEK))
    code = main(
        ["evidence", "verify", str(SNP / "report.bin"), "--cert", str(vcek),
         "--at", "2025-02-04T00:00:00Z"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, err) == (1, "")
    assert out.startswith("invalid (malformed_certificate): SNP endorsement")


@settings(max_examples=300)
@given(data=st.data())
def test_a_vcek_with_structural_mutations_is_an_invalid_verdict(data: st.DataObject) -> None:
    mutated = data.draw(structural_mutations(VCEK))
    verdict = verify_snp(REPORT, endorsements=[mutated, ASK, ARK], now=SNP_NOW)
    assert not verdict.valid or mutated == VCEK


@settings(max_examples=200)
@given(which=st.sampled_from([ASK, ARK]), data=st.data())
def test_given_amd_certificates_with_structural_mutations_are_a_verdict(
    which: bytes, data: st.DataObject
) -> None:
    # The ASK and ARK are pinned by the roots: a given copy that differs is not trusted, so the
    # verdict may be either; it must be a verdict.
    mutated = data.draw(structural_mutations(_der_of_pem(which)))
    verify_snp(REPORT, endorsements=[VCEK, mutated], now=SNP_NOW)


@settings(max_examples=300)
@given(
    name=st.sampled_from(sorted(name for name in COLLATERAL if name.endswith(".der"))),
    data=st.data(),
)
def test_tdx_collateral_with_structural_mutations_is_a_verdict(
    name: str, data: st.DataObject
) -> None:
    # A mutation may leave the CRL's meaning as it was, so the verdict may be either; it must
    # be a verdict.
    collateral = dict(COLLATERAL)
    collateral[name] = data.draw(structural_mutations(collateral[name]))
    verify_tdx(QUOTE, collateral=list(collateral.values()), now=TDX_NOW)


def _with_unused_signature_bits(der: bytes) -> bytes:
    """The same DER with the signature BIT STRING's unused-bits byte set to 1 (nothing else)."""
    children = parse(der).children
    assert children is not None
    # The signature BIT STRING ends the DER; its content opens with the unused-bits count.
    offset = len(der) - len(children[-1].content)
    assert der[offset] == 0
    return der[:offset] + b"\x01" + der[offset + 1 :]


def test_a_vcek_whose_signature_claims_unused_bits_is_malformed() -> None:
    """Issue 24's differential run: trustee-azure-milan-v2's VCEK with byte 0x34f (the unused-bits
    count of its signature BIT STRING) set to 1 was accepted here, as `cryptography` verifies the
    bytes padding and all (the last one is even, so the padding bit is a valid 0); go-sev-guest
    and OpenSSL refuse it. (With an odd last byte the DER parser refuses it already.)"""
    folder = ATTESTATION_DATA / "snp" / "trustee-azure-milan-v2"
    report, vcek = (folder / "report.bin").read_bytes(), (folder / "vcek.der").read_bytes()
    now = datetime(2023, 5, 3, tzinfo=UTC)
    assert verify_snp(report, endorsements=[vcek], now=now).valid
    edited = _with_unused_signature_bits(vcek)
    assert edited == vcek[:0x34F] + b"\x01" + vcek[0x350:]
    assert signature_unused_bits(edited) == 1
    verdict = verify_snp(report, endorsements=[edited], now=now)
    assert verdict.reason is Reason.MALFORMED_CERTIFICATE, verdict
    assert verdict.detail is not None
    assert "signature of 1 bits short of whole bytes" in verdict.detail


def test_a_crl_whose_signature_claims_unused_bits_is_malformed() -> None:
    collateral = dict(COLLATERAL)
    crl = collateral["pck_crl_platform.der"]
    assert crl[-1] % 2 == 0  # a valid padding bit: only the new check refuses it
    collateral["pck_crl_platform.der"] = _with_unused_signature_bits(crl)
    verdict = verify_tdx(QUOTE, collateral=list(collateral.values()), now=TDX_NOW)
    assert verdict.reason is Reason.MALFORMED_COLLATERAL, verdict
    assert verdict.detail is not None
    assert "bits short of whole bytes" in verdict.detail


def _der_of_pem(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)


PHALA = vector("phala-b0c06f-v4")
PHALA_COLLATERAL = {path.name: path.read_bytes() for path in collateral_paths(PHALA)}


def _flip(data: bytes, offset: int, bit: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ 1 << bit]) + data[offset + 1 :]


@pytest.mark.parametrize(
    ("crl", "offset", "bit"),
    [("root_ca_crl.der", 0x71, 5), ("root_ca_crl.der", 0x32, 1), ("pck_crl_platform.der", 0x56, 3)],
)
def test_a_crl_whose_issuer_name_was_damaged_is_refused(crl: str, offset: int, bit: int) -> None:
    """Issue 24's differential run: one bit flipped in a CRL's issuer name made it "another
    issuer's" CRL, which was skipped, so the quote passed with no revocation check; go-tdx-guest
    refused it. The bits are those of the run (phala-b0c06f-v4 with its collateral)."""
    quote, now = quote_bytes(PHALA), valid_at(PHALA)
    assert verify_tdx(quote, collateral=list(PHALA_COLLATERAL.values()), now=now).valid
    collateral = dict(PHALA_COLLATERAL)
    collateral[crl] = _flip(collateral[crl], offset, bit)
    verdict = verify_tdx(quote, collateral=list(collateral.values()), now=now)
    assert verdict.reason is Reason.BAD_CRL, verdict
    assert verdict.detail is not None
    assert "neither the root CA nor a PCK CA of this chain" in verdict.detail


def test_the_other_pck_cas_crl_is_skipped() -> None:
    """A Processor CA CRL given beside a Platform CA PCK does not concern it: not checked (its
    signature here is by a made-up key) and not refused."""
    platform_ca = x509.load_der_x509_crl(PHALA_COLLATERAL["pck_crl_platform.der"]).issuer
    processor_ca = x509.Name(
        [
            x509.NameAttribute(a.oid, "Intel SGX PCK Processor CA")
            if a.value == "Intel SGX PCK Platform CA"
            else a
            for a in platform_ca
        ]
    )
    now = valid_at(PHALA)
    other = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(processor_ca)
        .last_update(now - timedelta(days=1))
        .next_update(now + timedelta(days=1))
        .sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256())
        .public_bytes(Encoding.DER)
    )
    collateral = [*PHALA_COLLATERAL.values(), other]
    assert verify_tdx(quote_bytes(PHALA), collateral=collateral, now=now).valid
