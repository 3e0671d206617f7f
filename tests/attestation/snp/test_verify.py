"""Rejections: tampered reports, wrong roots, time, key kind, revocation, and the caches."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from contrast.attestation.certificates import load_certificate, load_certificates, parse_time
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.attestation.emulated.state import read_private_key
from contrast.attestation.errors import AttestationError, Reason
from contrast.attestation.snp import endorsement
from contrast.attestation.snp.report import (
    SIGNED_SIZE,
    Product,
    Report,
    SignerInfo,
    SigningKey,
)
from contrast.attestation.snp.trust import GENUINE_AMD_ROOTS, AmdRootStore
from contrast.attestation.snp.verify import VerifiedReport, verify_evidence
from tests.conftest import load_vectors

VECTORS = {v.name: v for v in load_vectors("snp")}
MILAN_V2 = VECTORS["snp/virtee-milan-v2"]
MILAN_V2_NOW = parse_time(MILAN_V2.expected["valid_at"])
NOW = datetime.now(UTC)


def _verify_real(
    report: bytes,
    *,
    now: datetime = MILAN_V2_NOW,
    roots: AmdRootStore = GENUINE_AMD_ROOTS,
    product: Product | None = None,
    chain: Sequence[x509.Certificate] | None = None,
) -> VerifiedReport:
    leaf = [load_certificate(MILAN_V2.file("vcek"))]
    return verify_evidence(
        report, leaf if chain is None else chain, now=now, roots=roots, product=product
    )


def _reason(call: object, *args: object, **kwargs: object) -> Reason:
    with pytest.raises(AttestationError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return caught.value.reason


def test_the_untouched_report_verifies() -> None:
    assert _verify_real(MILAN_V2.file("report")).product is Product.MILAN


# One bit in each field of the signed region. A flip in REPORTED_TCB or CHIP_ID is caught by the
# certificate comparison before the signature, everything else by the signature.
SIGNED_FIELDS = {
    "version": (0x000, {Reason.BAD_REPORT_SIGNATURE, Reason.MALFORMED_REPORT}),
    "guest_svn": (0x004, {Reason.BAD_REPORT_SIGNATURE}),
    "policy": (0x008, {Reason.BAD_REPORT_SIGNATURE}),
    "family_id": (0x010, {Reason.BAD_REPORT_SIGNATURE}),
    "image_id": (0x020, {Reason.BAD_REPORT_SIGNATURE}),
    "vmpl": (0x030, {Reason.BAD_REPORT_SIGNATURE}),
    "signature_algo": (0x034, {Reason.BAD_REPORT_SIGNATURE}),
    "current_tcb": (0x038, {Reason.BAD_REPORT_SIGNATURE}),
    "platform_info": (0x040, {Reason.BAD_REPORT_SIGNATURE}),
    "author_key_en": (0x048, {Reason.BAD_REPORT_SIGNATURE}),
    "report_data": (0x050, {Reason.BAD_REPORT_SIGNATURE}),
    "measurement": (0x090, {Reason.BAD_REPORT_SIGNATURE}),
    "host_data": (0x0C0, {Reason.BAD_REPORT_SIGNATURE}),
    "id_key_digest": (0x0E0, {Reason.BAD_REPORT_SIGNATURE}),
    "author_key_digest": (0x110, {Reason.BAD_REPORT_SIGNATURE}),
    "report_id": (0x140, {Reason.BAD_REPORT_SIGNATURE}),
    "report_id_ma": (0x160, {Reason.BAD_REPORT_SIGNATURE}),
    "reported_tcb": (0x180, {Reason.TCB_MISMATCH}),
    "reported_tcb_ucode": (0x187, {Reason.TCB_MISMATCH}),
    "chip_id": (0x1A0, {Reason.CHIP_ID_MISMATCH}),
    "chip_id_last": (0x1DF, {Reason.CHIP_ID_MISMATCH}),
    "committed_tcb": (0x1E0, {Reason.BAD_REPORT_SIGNATURE}),
    "current_build": (0x1E8, {Reason.BAD_REPORT_SIGNATURE}),
    "committed_major": (0x1EE, {Reason.BAD_REPORT_SIGNATURE}),
    "launch_tcb": (0x1F0, {Reason.BAD_REPORT_SIGNATURE}),
    "signature_r": (0x2A0, {Reason.BAD_REPORT_SIGNATURE}),
    "signature_s": (0x2E8, {Reason.BAD_REPORT_SIGNATURE}),
    "signature_r_padding": (0x2A0 + 50, {Reason.BAD_REPORT_SIGNATURE}),
}


@pytest.mark.parametrize("field", sorted(SIGNED_FIELDS))
def test_one_flipped_bit_is_refused(field: str) -> None:
    offset, reasons = SIGNED_FIELDS[field]
    data = bytearray(MILAN_V2.file("report"))
    data[offset] ^= 0x01
    assert _reason(_verify_real, bytes(data)) in reasons


@pytest.mark.parametrize("offset", [0x04C, 0x188, 0x1F8, 0x208, 0x330, 0x49F])
def test_a_flipped_reserved_or_version_bit_is_malformed(offset: int) -> None:
    data = bytearray(MILAN_V2.file("report"))
    data[offset] ^= 0x01
    assert _reason(_verify_real, bytes(data)) is Reason.MALFORMED_REPORT


@pytest.mark.parametrize("size", [1183, 1185, 0])
def test_truncated_or_overlong_report(size: int) -> None:
    data = MILAN_V2.file("report").ljust(size, b"\0")[:size]
    assert _reason(_verify_real, data) is Reason.MALFORMED_REPORT_LENGTH


def test_a_milan_report_against_genoa_roots_is_untrusted() -> None:
    genoa = GENUINE_AMD_ROOTS.products[Product.GENOA]
    wrong = AmdRootStore({Product.MILAN: genoa}, genuine=True)
    assert _reason(_verify_real, MILAN_V2.file("report"), roots=wrong) is Reason.UNTRUSTED_VCEK
    only_genoa = AmdRootStore({Product.GENOA: genoa}, genuine=True)
    assert _reason(_verify_real, MILAN_V2.file("report"), roots=only_genoa) is Reason.UNTRUSTED_VCEK


def test_configured_product_must_match_the_certificate() -> None:
    reason = _reason(_verify_real, MILAN_V2.file("report"), product=Product.GENOA)
    assert reason is Reason.PRODUCT_MISMATCH


def test_v3_report_and_configuration_must_agree() -> None:
    vector = VECTORS["snp/oak-milan-v3-cb"]
    reason = _reason(
        verify_evidence,
        vector.file("report"),
        [load_certificate(vector.file("vcek"))],
        now=parse_time(vector.expected["valid_at"]),
        roots=GENUINE_AMD_ROOTS,
        product=Product.GENOA,
    )
    assert reason is Reason.PRODUCT_MISMATCH


def test_expired_and_not_yet_valid_vcek() -> None:
    vcek = load_certificate(MILAN_V2.file("vcek"))
    after = vcek.not_valid_after_utc + timedelta(seconds=1)
    before = vcek.not_valid_before_utc - timedelta(seconds=1)
    assert _reason(_verify_real, MILAN_V2.file("report"), now=after) is Reason.CERTIFICATE_EXPIRED
    reason = _reason(_verify_real, MILAN_V2.file("report"), now=before)
    assert reason is Reason.CERTIFICATE_NOT_YET_VALID


def test_given_genuine_intermediates_are_accepted_in_any_order() -> None:
    vector = VECTORS["snp/trustee-azure-milan-v2"]
    chain = load_certificates((vector.path / "vcek_chain.pem").read_bytes())
    verified = verify_evidence(
        vector.file("report"),
        list(reversed(chain)),
        now=parse_time(vector.expected["valid_at"]),
        roots=GENUINE_AMD_ROOTS,
    )
    assert verified.product is Product.MILAN


def test_a_foreign_ark_is_refused(emulated: EmulatedSnp) -> None:
    ark = emulated.roots.products[Product.MILAN].ark
    chain = [load_certificate(MILAN_V2.file("vcek")), ark]
    reason = _reason(_verify_real, MILAN_V2.file("report"), chain=chain)
    assert reason is Reason.UNTRUSTED_ROOT


def test_a_foreign_ask_does_not_help(emulated: EmulatedSnp) -> None:
    ask = emulated.roots.products[Product.MILAN].ask
    chain = [load_certificate(MILAN_V2.file("vcek")), ask]
    assert _verify_real(MILAN_V2.file("report"), chain=chain).product is Product.MILAN
    report, certificates = emulated.issue(bytes(64))
    reason = _reason(
        verify_evidence,
        report,
        [load_certificate(certificates[0]), ask],
        now=NOW,
        roots=GENUINE_AMD_ROOTS,
    )
    assert reason is Reason.UNTRUSTED_VCEK


def test_no_leaf_certificate() -> None:
    assert _reason(_verify_real, MILAN_V2.file("report"), chain=[]) is Reason.CERTIFICATE_MISSING


# --- the emulated hierarchy: VLEKs, key-kind mismatches and CRLs ---


@pytest.fixture(scope="module")
def tee_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tee")


@pytest.fixture(scope="module")
def emulated(tee_dir: Path) -> EmulatedSnp:
    return EmulatedSnp(tee_dir)


def _verify_emulated(
    emulated: EmulatedSnp,
    report: bytes,
    chain: Sequence[x509.Certificate],
    *,
    crl: x509.CertificateRevocationList | None = None,
    now: datetime = NOW,
) -> VerifiedReport:
    return verify_evidence(report, chain, now=now, roots=emulated.roots, crl=crl)


def _resign(report: Report, key: ec.EllipticCurvePrivateKey) -> bytes:
    unsigned = dataclasses.replace(report, signature_r=0, signature_s=0)
    signature = key.sign(unsigned.to_bytes()[:SIGNED_SIZE], ec.ECDSA(hashes.SHA384()))
    r, s = decode_dss_signature(signature)
    return dataclasses.replace(unsigned, signature_r=r, signature_s=s).to_bytes()


def _vlek(
    emulated: EmulatedSnp, state: Path
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A VLEK issued by the emulated ASVK, with the emulated chip's TCB."""
    asvk_key = read_private_key(state / "asvk.key")
    assert isinstance(asvk_key, rsa.RSAPrivateKey)
    asvk = emulated.roots.products[Product.MILAN].asvk
    assert asvk is not None
    key = ec.generate_private_key(ec.SECP384R1())
    tcb = emulated.tcb
    builder = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, endorsement.VLEK_COMMON_NAME)])
        )
        .issuer_name(asvk.subject)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(NOW - timedelta(days=1))
        .not_valid_after(NOW + timedelta(days=365))
    )
    values = {
        endorsement.OID_STRUCT_VERSION: b"\x02\x01\x00",
        endorsement.OID_PRODUCT_NAME: b"\x16\x05Milan",
        endorsement.OID_BL_SPL: bytes([2, 1, tcb.bootloader]),
        endorsement.OID_TEE_SPL: bytes([2, 1, tcb.tee]),
        endorsement.OID_SNP_SPL: bytes([2, 1, tcb.snp]),
        endorsement.OID_UCODE_SPL: bytes([2, 2, 0, tcb.microcode]),
        endorsement.OID_CSP_ID: b"\x16\x0bCN=emulated",
    }
    for oid, value in values.items():
        builder = builder.add_extension(x509.UnrecognizedExtension(oid, value), critical=False)
    pss = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)
    return builder.sign(asvk_key, hashes.SHA384(), rsa_padding=pss), key


@pytest.fixture(scope="module")
def state(emulated: EmulatedSnp, tee_dir: Path) -> Path:
    return tee_dir / "snp" / "milan"


def test_emulated_evidence_verifies(emulated: EmulatedSnp) -> None:
    report, certificates = emulated.issue(bytes(range(64)))
    verified = _verify_emulated(emulated, report, [load_certificate(certificates[0])])
    assert verified.claims()["report_data"] == bytes(range(64)).hex()


def test_a_vlek_signed_report_verifies_and_a_vlek_posing_as_vcek_does_not(
    emulated: EmulatedSnp, state: Path
) -> None:
    vlek, key = _vlek(emulated, state)
    report, _ = emulated.issue(bytes(64))
    parsed = Report.from_bytes(report)
    as_vlek = dataclasses.replace(
        parsed, signer_info=SignerInfo.build(SigningKey.VLEK), chip_id=bytes(64)
    )
    verified = _verify_emulated(emulated, _resign(as_vlek, key), [vlek])
    assert verified.claims()["signing_key"] == "vlek"
    assert verified.endorsement.csp_id == "CN=emulated"
    # The report says VCEK, the certificate is a VLEK.
    as_vcek = dataclasses.replace(parsed, chip_id=bytes(64))
    reason = _reason(_verify_emulated, emulated, _resign(as_vcek, key), [vlek])
    assert reason is Reason.SIGNING_KEY_MISMATCH


def test_a_report_signed_by_no_key_is_refused(emulated: EmulatedSnp) -> None:
    report, certificates = emulated.issue(bytes(64))
    unsigned = dataclasses.replace(
        Report.from_bytes(report), signer_info=SignerInfo.build(SigningKey.NONE)
    ).to_bytes()
    reason = _reason(_verify_emulated, emulated, unsigned, [load_certificate(certificates[0])])
    assert reason is Reason.BAD_REPORT_SIGNATURE


def test_crl_revocation(emulated: EmulatedSnp, tmp_path: Path) -> None:
    report, certificates = emulated.issue(bytes(64))
    vcek = load_certificate(certificates[0])
    ask = emulated.roots.products[Product.MILAN].ask
    assert _verify_emulated(emulated, report, [vcek], crl=emulated.crl([], now=NOW))
    for revoked in (vcek, ask):
        crl = emulated.crl([revoked], now=NOW)
        reason = _reason(_verify_emulated, emulated, report, [vcek], crl=crl)
        assert reason is Reason.CERTIFICATE_REVOKED
    stale = emulated.crl([], now=NOW - timedelta(days=30))
    assert _reason(_verify_emulated, emulated, report, [vcek], crl=stale) is Reason.BAD_CRL
    foreign = EmulatedSnp(tmp_path).crl([], now=NOW)
    assert _reason(_verify_emulated, emulated, report, [vcek], crl=foreign) is Reason.BAD_CRL


def test_cached_chains_do_not_mask_a_later_failure(emulated: EmulatedSnp) -> None:
    report, certificates = emulated.issue(bytes(64))
    chain = [load_certificate(certificates[0])]
    for _ in range(2):
        assert _verify_emulated(emulated, report, chain)
    tampered = bytearray(report)
    tampered[0x90] ^= 1
    assert (
        _reason(_verify_emulated, emulated, bytes(tampered), chain) is Reason.BAD_REPORT_SIGNATURE
    )
    late = chain[0].not_valid_after_utc + timedelta(days=1)
    assert _reason(_verify_emulated, emulated, report, chain, now=late) in {
        Reason.CERTIFICATE_EXPIRED
    }
    assert (
        _reason(verify_evidence, report, chain, now=NOW, roots=GENUINE_AMD_ROOTS)
        is Reason.UNTRUSTED_VCEK
    )


def test_a_changed_vcek_byte_misses_the_checked_chain() -> None:
    """A chain checked once is remembered by its certificate objects; a VCEK with one changed
    byte is another object and is checked from scratch (refused), the original still passes."""
    report = MILAN_V2.file("report")
    assert _verify_real(report).product is Product.MILAN
    vcek = bytearray(MILAN_V2.file("vcek"))
    signature_byte = len(vcek) - 10  # inside the ASK's signature over the VCEK
    vcek[signature_byte] ^= 0x01
    changed = load_certificate(bytes(vcek))
    assert _reason(_verify_real, report, chain=[changed]) is Reason.UNTRUSTED_VCEK
    assert _verify_real(report).product is Product.MILAN


def test_a_remembered_chain_is_still_checked_for_validity_at_each_time() -> None:
    report = MILAN_V2.file("report")
    assert _verify_real(report).product is Product.MILAN
    assert _reason(_verify_real, report, now=MILAN_V2_NOW + timedelta(days=365 * 30)) is (
        Reason.CERTIFICATE_EXPIRED
    )


def test_a_remembered_chain_is_not_used_for_other_roots() -> None:
    report = MILAN_V2.file("report")
    assert _verify_real(report).product is Product.MILAN
    milan = GENUINE_AMD_ROOTS.require(Product.MILAN)
    genoa = GENUINE_AMD_ROOTS.require(Product.GENOA)
    swapped = AmdRootStore({Product.MILAN: dataclasses.replace(milan, ask=genoa.ask)})
    assert _reason(_verify_real, report, roots=swapped) is Reason.UNTRUSTED_VCEK
