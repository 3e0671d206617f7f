"""Tampered quotes and collateral: each is refused, and for the reason that names the change."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.attestation.emulated.tdx import EmulatedTdx
from contrast.attestation.errors import AttestationError, Reason
from contrast.attestation.tdx.collateral import load_collateral
from contrast.attestation.tdx.quote import Quote
from contrast.attestation.tdx.trust import GENUINE_INTEL_ROOTS, IntelRootStore
from contrast.attestation.tdx.verify import verify_quote_bytes
from tests.attestation.tdx.vectors import quote_bytes, valid_at, vector
from tests.conftest import ATTESTATION_DATA

V4 = vector("trustee-quote4-v4-debug")
V5 = vector("trustee-quote5-v5")
GTG = ATTESTATION_DATA / "collateral" / "intel" / "gtg-2023-06"

# Offsets inside the TD report body (research/attestation.md §4.2).
BODY_FIELDS = {
    "td_attributes": 120,
    "mr_td": 136,
    "mr_config_id": 184,
    "rtmr0": 328,
    "rtmr1": 376,
    "rtmr2": 424,
    "rtmr3": 472,
    "report_data": 520,
}


def flipped(data: bytes, offset: int, bit: int = 0) -> bytes:
    changed = bytearray(data)
    changed[offset] ^= 1 << bit
    return bytes(changed)


def reason_of(data: bytes, now: datetime, **keywords: object) -> Reason:
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(data, now=now, roots=GENUINE_INTEL_ROOTS, **keywords)  # type: ignore[arg-type]
    return caught.value.reason


def body_start(data: bytes) -> int:
    return 48 if struct.unpack_from("<H", data)[0] == 4 else 54


def signature_data_start(data: bytes) -> int:
    quote = Quote.from_bytes(data)
    return len(quote.signed_bytes) + 4


@pytest.mark.parametrize("source", [V4, V5], ids=lambda v: v.name)
@pytest.mark.parametrize("field", sorted(BODY_FIELDS))
def test_flipped_body_bit_breaks_the_quote_signature(source: object, field: str) -> None:
    data = quote_bytes(source)  # type: ignore[arg-type]
    tampered = flipped(data, body_start(data) + BODY_FIELDS[field], bit=3)
    assert reason_of(tampered, valid_at(source)) is Reason.BAD_QUOTE_SIGNATURE  # type: ignore[arg-type]


@pytest.mark.parametrize("source", [V4, V5], ids=lambda v: v.name)
def test_flipped_header_user_data_breaks_the_quote_signature(source: object) -> None:
    data = quote_bytes(source)  # type: ignore[arg-type]
    assert reason_of(flipped(data, 30), valid_at(source)) is Reason.BAD_QUOTE_SIGNATURE  # type: ignore[arg-type]


def test_flipped_qe_vendor_id_breaks_the_quote_signature() -> None:
    assert reason_of(flipped(quote_bytes(V4), 12), valid_at(V4)) is Reason.BAD_QUOTE_SIGNATURE


def test_other_version_or_tee_type_is_unsupported() -> None:
    data = quote_bytes(V4)
    assert reason_of(flipped(data, 0, bit=1), valid_at(V4)) is Reason.UNSUPPORTED_QUOTE
    assert reason_of(flipped(data, 4, bit=7), valid_at(V4)) is Reason.UNSUPPORTED_QUOTE


def test_other_attestation_key_type_is_unsupported() -> None:
    assert reason_of(flipped(quote_bytes(V4), 2, bit=0), valid_at(V4)) is Reason.UNSUPPORTED_QUOTE


@pytest.mark.parametrize("source", [V4, V5], ids=lambda v: v.name)
def test_flipped_quote_signature(source: object) -> None:
    data = quote_bytes(source)  # type: ignore[arg-type]
    start = signature_data_start(data)
    assert reason_of(flipped(data, start + 5), valid_at(source)) is Reason.BAD_QUOTE_SIGNATURE  # type: ignore[arg-type]


@pytest.mark.parametrize("source", [V4, V5], ids=lambda v: v.name)
def test_flipped_attestation_key_breaks_the_qe_binding(source: object) -> None:
    data = quote_bytes(source)  # type: ignore[arg-type]
    start = signature_data_start(data) + 64
    assert reason_of(flipped(data, start + 10), valid_at(source)) is Reason.QE_REPORT_DATA_MISMATCH  # type: ignore[arg-type]


@pytest.mark.parametrize("offset", [0, 16, 48, 64, 128, 256, 258, 320, 383])
def test_flipped_qe_report_breaks_its_signature(offset: int) -> None:
    data = quote_bytes(V4)
    qe_report = signature_data_start(data) + 134
    assert reason_of(flipped(data, qe_report + offset), valid_at(V4)) is (
        Reason.BAD_QE_REPORT_SIGNATURE
    )


def test_flipped_qe_report_signature() -> None:
    data = quote_bytes(V4)
    signature = signature_data_start(data) + 134 + 384
    assert reason_of(flipped(data, signature + 40), valid_at(V4)) is Reason.BAD_QE_REPORT_SIGNATURE


@pytest.mark.parametrize("offset", [0, 17, 31])
def test_flipped_qe_auth_data_breaks_the_binding(offset: int) -> None:
    data = quote_bytes(V4)
    auth_data = signature_data_start(data) + 134 + 384 + 64 + 2
    assert reason_of(flipped(data, auth_data + offset), valid_at(V4)) is (
        Reason.QE_REPORT_DATA_MISMATCH
    )


def test_tampered_pck_certificate_is_untrusted() -> None:
    data = quote_bytes(V4)
    quote = Quote.from_bytes(data)
    qe = quote.signature_data.qe_certification
    assert qe is not None
    pem = qe.certification.data
    # A character inside the base64 of the PCK's signature (end of the first certificate).
    index = pem.index(b"-----END CERTIFICATE-----") - 10
    replacement = b"A" if pem[index : index + 1] != b"A" else b"B"
    tampered = data.replace(pem, pem[:index] + replacement + pem[index + 1 :])
    assert reason_of(tampered, valid_at(V4)) in (Reason.UNTRUSTED_PCK, Reason.MALFORMED_CERTIFICATE)


def test_wrong_root_is_untrusted(tmp_path: Path) -> None:
    other = EmulatedTdx(tmp_path).roots
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(quote_bytes(V4), now=valid_at(V4), roots=other)
    assert caught.value.reason is Reason.UNTRUSTED_PCK


def test_root_without_tcb_signing_still_checks_quotes() -> None:
    roots = IntelRootStore(GENUINE_INTEL_ROOTS.root, genuine=True)
    verified = verify_quote_bytes(quote_bytes(V4), now=valid_at(V4), roots=roots)
    assert verified.genuine


def test_pck_validity_is_checked_at_now() -> None:
    data = quote_bytes(V4)  # PCK valid 2023-02-07 → 2030-02-07
    early = datetime(2023, 1, 1, tzinfo=UTC)
    late = datetime(2031, 1, 1, tzinfo=UTC)
    assert reason_of(data, early) is Reason.CERTIFICATE_NOT_YET_VALID
    assert reason_of(data, late) is Reason.CERTIFICATE_EXPIRED


@pytest.mark.parametrize("length", [0, 1, 47, 48, 100, 631, 632, 635, 636, 700, 1000, 4935])
def test_truncated_quote_is_malformed(length: int) -> None:
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(quote_bytes(V4)[:length], now=valid_at(V4), roots=GENUINE_INTEL_ROOTS)
    assert caught.value.reason in (Reason.MALFORMED_QUOTE, Reason.UNSUPPORTED_QUOTE)
    if length >= 48:
        assert caught.value.reason is Reason.MALFORMED_QUOTE


@pytest.mark.parametrize("trailer", [b"\0" * 3065, b"\nextra bytes\n", b"\xff"])
def test_trailing_bytes_are_ignored(trailer: bytes) -> None:
    verified = verify_quote_bytes(
        quote_bytes(V4) + trailer, now=valid_at(V4), roots=GENUINE_INTEL_ROOTS
    )
    assert verified.quote.trailing == trailer


def test_inconsistent_nested_lengths_are_malformed() -> None:
    data = bytearray(quote_bytes(V4))
    start = signature_data_start(bytes(data))
    # The certification data size (u32 after the u16 type) one byte short of what follows.
    size_offset = start + 128 + 2
    (size,) = struct.unpack_from("<I", data, size_offset)
    struct.pack_into("<I", data, size_offset, size - 1)
    assert reason_of(bytes(data), valid_at(V4)) is Reason.MALFORMED_QUOTE


# Collateral.


def gtg_files(*names: str) -> list[bytes]:
    return [(GTG / name).read_bytes() for name in names]


ALL_GTG = ("tcb_info.json", "qe_identity.json", "pck_crl_platform.der", "root_ca_crl.der")


@pytest.mark.parametrize(
    ("now", "names", "reason"),
    [
        (datetime(2023, 7, 20, tzinfo=UTC), ALL_GTG, Reason.TCB_INFO_EXPIRED),
        (datetime(2023, 6, 18, tzinfo=UTC), ALL_GTG, Reason.TCB_INFO_NOT_YET_VALID),
        (datetime(2023, 7, 10, tzinfo=UTC), ALL_GTG, Reason.QE_IDENTITY_EXPIRED),
        (datetime(2023, 6, 1, tzinfo=UTC), ("qe_identity.json",), Reason.QE_IDENTITY_NOT_YET_VALID),
        (datetime(2023, 7, 10, tzinfo=UTC), ("pck_crl_platform.der",), Reason.PCK_CRL_EXPIRED),
        (datetime(2024, 5, 1, tzinfo=UTC), ("root_ca_crl.der",), Reason.ROOT_CA_CRL_EXPIRED),
        (datetime(2023, 6, 1, tzinfo=UTC), ("pck_crl_platform.der",), Reason.BAD_CRL),
    ],
)
def test_collateral_windows(now: datetime, names: tuple[str, ...], reason: Reason) -> None:
    assert reason_of(quote_bytes(V4), now, collateral=load_collateral(gtg_files(*names))) is reason


def test_tampered_qe_identity_signature() -> None:
    text = (GTG / "qe_identity.json").read_bytes().replace(b'"isvsvn":4', b'"isvsvn":3', 1)
    collateral = load_collateral([text])
    assert reason_of(quote_bytes(V4), valid_at(V4), collateral=collateral) is (
        Reason.BAD_QE_IDENTITY_SIGNATURE
    )


def test_reformatted_tcb_info_no_longer_verifies() -> None:
    """The signature covers the exact text: re-serialising the same JSON breaks it."""
    text = (GTG / "tcb_info.json").read_bytes().replace(b'","', b'", "')
    collateral = load_collateral([text])
    assert reason_of(quote_bytes(V4), valid_at(V4), collateral=collateral) is (
        Reason.BAD_TCB_INFO_SIGNATURE
    )


def test_no_tcb_signing_certificate_valid_at_now() -> None:
    roots = IntelRootStore(GENUINE_INTEL_ROOTS.root, genuine=True)
    collateral = load_collateral(gtg_files("tcb_info.json"))
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(quote_bytes(V4), now=valid_at(V4), roots=roots, collateral=collateral)
    assert caught.value.reason is Reason.CERTIFICATE_EXPIRED


def test_tcb_signing_chain_from_collateral_is_used() -> None:
    roots = IntelRootStore(GENUINE_INTEL_ROOTS.root, genuine=True)
    chain = (ATTESTATION_DATA / "roots" / "intel" / "tcb_signing_chain_2018.pem").read_bytes()
    collateral = load_collateral([*gtg_files(*ALL_GTG), chain])
    verified = verify_quote_bytes(
        quote_bytes(V4), now=valid_at(V4), roots=roots, collateral=collateral
    )
    assert verified.claims()["tcb_status"] == "UpToDate"


def test_fmspc_mismatch_names_the_fix() -> None:
    phala = ATTESTATION_DATA / "collateral" / "intel" / "phala-2025-06"
    collateral = load_collateral([(phala / "tcb_info.json").read_bytes()])
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(
            quote_bytes(V5),
            now=datetime(2025, 6, 20, tzinfo=UTC),
            roots=GENUINE_INTEL_ROOTS,
            collateral=collateral,
        )
    assert caught.value.reason is Reason.FMSPC_MISMATCH
    assert "fmspc=90c06f000000" in caught.value.explain()


# Revocation, QE identity and TDX module mismatches need collateral signed by keys we hold: the
# emulated TEE's.

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def emulated_key(tee: EmulatedTdx, name: str) -> ec.EllipticCurvePrivateKey:
    from contrast.attestation.emulated.state import read_private_key

    key = read_private_key(tee.state_dir / "tdx" / f"{name}.key")
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def emulated_certificates(tee: EmulatedTdx) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates((tee.state_dir / "tdx" / "chain.pem").read_bytes())


def revocation_list(
    issuer: x509.Certificate, key: ec.EllipticCurvePrivateKey, serial: int
) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    revoked = (
        x509.RevokedCertificateBuilder()
        .serial_number(serial)
        .revocation_date(NOW - timedelta(days=1))
        .build()
    )
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(issuer.subject)
        .last_update(NOW - timedelta(days=1))
        .next_update(NOW + timedelta(days=1))
        .add_revoked_certificate(revoked)
        .sign(key, hashes.SHA256())
    )
    return crl.public_bytes(Encoding.DER)


def test_revoked_pck_is_refused(tmp_path: Path) -> None:
    tee = EmulatedTdx(tmp_path)
    quote = tee.issue(bytes(64))
    pck, pck_ca, _ = emulated_certificates(tee)
    crl = revocation_list(pck_ca, emulated_key(tee, "pck_ca"), pck.serial_number)
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(quote, now=NOW, roots=tee.roots, collateral=load_collateral([crl]))
    assert caught.value.reason is Reason.CERTIFICATE_REVOKED


def test_revoked_pck_ca_is_refused(tmp_path: Path) -> None:
    tee = EmulatedTdx(tmp_path)
    quote = tee.issue(bytes(64))
    _, pck_ca, root = emulated_certificates(tee)
    crl = revocation_list(root, emulated_key(tee, "root_ca"), pck_ca.serial_number)
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(quote, now=NOW, roots=tee.roots, collateral=load_collateral([crl]))
    assert caught.value.reason is Reason.CERTIFICATE_REVOKED


def test_crl_signed_by_another_key_is_refused(tmp_path: Path) -> None:
    tee = EmulatedTdx(tmp_path)
    quote = tee.issue(bytes(64))
    _, pck_ca, _ = emulated_certificates(tee)
    crl = revocation_list(pck_ca, ec.generate_private_key(ec.SECP256R1()), 1)
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(quote, now=NOW, roots=tee.roots, collateral=load_collateral([crl]))
    assert caught.value.reason is Reason.BAD_CRL


def resigned(tee: EmulatedTdx, document: bytes, member: str, old: bytes, new: bytes) -> bytes:
    """The emulated collateral document with `old` replaced, signed again by its TCB Signing key."""
    import json

    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    body = json.dumps(json.loads(document)[member], separators=(",", ":")).encode()
    assert old in body
    body = body.replace(old, new)
    der = emulated_key(tee, "tcb_signing").sign(body, ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    signature = (r.to_bytes(32, "big") + s.to_bytes(32, "big")).hex()
    return b'{"' + member.encode() + b'":' + body + b',"signature":"' + signature.encode() + b'"}'


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b'"isvprodid":2', b'"isvprodid":3'),
        (b'"mrsigner":"', b'"mrsigner":"00'),
        (b'"miscselect":"00000000"', b'"miscselect":"00000001"'),
        (b'"attributes":"11', b'"attributes":"13'),
    ],
)
def test_qe_identity_mismatch(tmp_path: Path, old: bytes, new: bytes) -> None:
    tee = EmulatedTdx(tmp_path)
    tcb_info, qe_identity, *_ = tee.collateral_files(now=NOW)
    if new.startswith(b'"mrsigner":"00'):  # keep the length: replace the first byte instead
        text = qe_identity.decode()
        current = text.split('"mrsigner":"')[1][:2]
        old, new = (
            f'"mrsigner":"{current}'.encode(),
            (f'"mrsigner":"{"00" if current != "00" else "11"}'.encode()),
        )
    changed = resigned(tee, qe_identity, "enclaveIdentity", old, new)
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(
            tee.issue(bytes(64)),
            now=NOW,
            roots=tee.roots,
            collateral=load_collateral([tcb_info, changed]),
        )
    assert caught.value.reason is Reason.QE_IDENTITY_MISMATCH


def test_tdx_module_signer_mismatch(tmp_path: Path) -> None:
    tee = EmulatedTdx(tmp_path)
    tcb_info, *_ = tee.collateral_files(now=NOW)
    changed = resigned(tee, tcb_info, "tcbInfo", b'"mrsigner":"00', b'"mrsigner":"11')
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(
            tee.issue(bytes(64)), now=NOW, roots=tee.roots, collateral=load_collateral([changed])
        )
    assert caught.value.reason is Reason.TDX_MODULE_MISMATCH


def test_pce_id_mismatch(tmp_path: Path) -> None:
    tee = EmulatedTdx(tmp_path)
    tcb_info, *_ = tee.collateral_files(now=NOW)
    changed = resigned(tee, tcb_info, "tcbInfo", b'"pceId":"0000"', b'"pceId":"0100"')
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(
            tee.issue(bytes(64)), now=NOW, roots=tee.roots, collateral=load_collateral([changed])
        )
    assert caught.value.reason is Reason.PCE_ID_MISMATCH


# The caches must never turn a refusal into an acceptance.


def test_cached_chain_is_rechecked_outside_its_validity() -> None:
    data = quote_bytes(V4)
    verify_quote_bytes(data, now=valid_at(V4), roots=GENUINE_INTEL_ROOTS)
    assert reason_of(data, datetime(2031, 1, 1, tzinfo=UTC)) is Reason.CERTIFICATE_EXPIRED


def test_cached_attestation_key_still_checks_each_quote_signature() -> None:
    data = quote_bytes(V4)
    verify_quote_bytes(data, now=valid_at(V4), roots=GENUINE_INTEL_ROOTS)
    tampered = flipped(data, body_start(data) + BODY_FIELDS["report_data"])
    assert reason_of(tampered, valid_at(V4)) is Reason.BAD_QUOTE_SIGNATURE


def test_cached_collateral_windows_are_rechecked() -> None:
    collateral = load_collateral(gtg_files(*ALL_GTG))
    data = quote_bytes(V4)
    verify_quote_bytes(data, now=valid_at(V4), roots=GENUINE_INTEL_ROOTS, collateral=collateral)
    late = datetime(2023, 7, 20, tzinfo=UTC)
    assert reason_of(data, late, collateral=collateral) is Reason.TCB_INFO_EXPIRED
    crl_only = load_collateral(gtg_files("pck_crl_platform.der"))
    verify_quote_bytes(data, now=valid_at(V4), roots=GENUINE_INTEL_ROOTS, collateral=crl_only)
    assert reason_of(data, datetime(2023, 7, 10, tzinfo=UTC), collateral=crl_only) is (
        Reason.PCK_CRL_EXPIRED
    )
