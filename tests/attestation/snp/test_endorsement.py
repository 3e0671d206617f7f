"""The VCEK/VLEK extension reader on hand-made certificates and arbitrary extension bytes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.attestation.errors import MalformedEvidence, Reason
from contrast.attestation.snp import endorsement
from contrast.attestation.snp.endorsement import Endorsement, certificate_kind, product_name
from contrast.attestation.snp.report import Product, SigningKey, TcbLayout

_KEY = ec.generate_private_key(ec.SECP256R1())
_NOW = datetime(2025, 1, 1, tzinfo=UTC)


def _certificate(
    extensions: dict[x509.ObjectIdentifier, bytes], common_name: str = "SEV-VCEK"
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(_KEY.public_key())
        .serial_number(1)
        .not_valid_before(_NOW)
        .not_valid_after(_NOW + timedelta(days=1))
    )
    for oid, value in extensions.items():
        builder = builder.add_extension(x509.UnrecognizedExtension(oid, value), critical=False)
    return builder.sign(_KEY, hashes.SHA256())


def _integer(value: int) -> bytes:
    return bytes([2, 1, value]) if value < 0x80 else bytes([2, 2, 0, value])


def _milan(**overrides: bytes) -> dict[x509.ObjectIdentifier, bytes]:
    values = {
        endorsement.OID_STRUCT_VERSION: _integer(0),
        endorsement.OID_PRODUCT_NAME: b"\x16\x08Milan-B0",
        endorsement.OID_BL_SPL: _integer(3),
        endorsement.OID_TEE_SPL: _integer(0),
        endorsement.OID_SNP_SPL: _integer(8),
        endorsement.OID_UCODE_SPL: _integer(0xD9),
        endorsement.OID_HW_ID: bytes(range(64)),
    }
    for key, value in overrides.items():
        values[getattr(endorsement, key)] = value
    return values


def test_reads_a_milan_vcek() -> None:
    facts = Endorsement.from_certificate(_certificate(_milan()))
    assert facts.kind is SigningKey.VCEK
    assert facts.product is Product.MILAN
    assert facts.product_name == "Milan-B0"
    assert facts.tcb.layout is TcbLayout.MILAN_GENOA
    assert (facts.tcb.bootloader, facts.tcb.snp, facts.tcb.microcode) == (3, 8, 0xD9)
    assert facts.hw_id == bytes(range(64))


def test_reads_a_vlek_with_its_csp() -> None:
    values = _milan()
    del values[endorsement.OID_HW_ID]
    values[endorsement.OID_CSP_ID] = b"\x16\x05CN=aw"
    facts = Endorsement.from_certificate(_certificate(values, "SEV-VLEK"))
    assert facts.kind is SigningKey.VLEK
    assert facts.csp_id == "CN=aw"
    assert facts.hw_id is None


def test_kind_falls_back_to_the_extensions() -> None:
    assert certificate_kind(_certificate(_milan(), "something")) is SigningKey.VCEK
    values = _milan()
    del values[endorsement.OID_HW_ID]
    with pytest.raises(MalformedEvidence):
        certificate_kind(_certificate(values, "something"))


@pytest.mark.parametrize(
    ("override", "value"),
    [
        ("OID_BL_SPL", b"\x04\x01\x03"),  # OCTET STRING instead of INTEGER
        ("OID_BL_SPL", b"\x02\x02\x01\x00"),  # 256
        ("OID_BL_SPL", b"\x02\x01\xff"),  # negative
        ("OID_BL_SPL", b"\x02\x00"),  # empty
        ("OID_BL_SPL", b"\x02\x02\x03"),  # short
        ("OID_PRODUCT_NAME", b"\x16\x02\xff\xfe"),  # not ASCII
        ("OID_HW_ID", bytes(63)),
        ("OID_HW_ID", b"\x04\x3f" + bytes(63)),
    ],
)
def test_bad_extension_values_are_malformed(override: str, value: bytes) -> None:
    with pytest.raises(MalformedEvidence) as caught:
        Endorsement.from_certificate(_certificate(_milan(**{override: value})))
    assert caught.value.reason is Reason.MALFORMED_CERTIFICATE


def test_a_vcek_needs_its_spls_and_hw_id() -> None:
    for oid in (endorsement.OID_UCODE_SPL, endorsement.OID_HW_ID):
        values = _milan()
        del values[oid]
        with pytest.raises(MalformedEvidence):
            Endorsement.from_certificate(_certificate(values))


def test_product_name_is_lenient() -> None:
    assert product_name(_certificate(_milan(OID_PRODUCT_NAME=b"\x05\x00"))) is None
    assert product_name(_certificate(_milan())) == "Milan-B0"


_OIDS = [
    endorsement.OID_STRUCT_VERSION,
    endorsement.OID_PRODUCT_NAME,
    endorsement.OID_BL_SPL,
    endorsement.OID_TEE_SPL,
    endorsement.OID_SNP_SPL,
    endorsement.OID_SPL4,
    endorsement.OID_UCODE_SPL,
    endorsement.OID_FMC_SPL,
    endorsement.OID_HW_ID,
    endorsement.OID_CSP_ID,
]


@settings(max_examples=100)
@given(
    st.dictionaries(st.sampled_from(_OIDS), st.binary(max_size=80), max_size=len(_OIDS)),
    st.sampled_from(["SEV-VCEK", "SEV-VLEK", "x"]),
)
def test_any_extension_bytes_read_or_raise_malformed(
    values: dict[x509.ObjectIdentifier, bytes], common_name: str
) -> None:
    certificate = _certificate(values, common_name)
    try:
        facts = Endorsement.from_certificate(certificate)
    except MalformedEvidence as error:
        reason: Reason | None = error.reason
    else:
        reason = None
        assert facts.kind in (SigningKey.VCEK, SigningKey.VLEK)
        assert facts.hw_id is None or len(facts.hw_id) in (8, 64)
    assert reason in (None, Reason.MALFORMED_CERTIFICATE)
    name = product_name(certificate)
    assert name is None or isinstance(name, str)


@given(st.binary(max_size=300), st.sampled_from([0x02, 0x04, 0x16]))
def test_der_primitive_decoder(data: bytes, tag: int) -> None:
    try:
        content = endorsement.decode_der(data, tag, "test")
    except MalformedEvidence as error:
        reason: Reason | None = error.reason
    else:
        reason = None
        assert data[0] == tag
        assert data.endswith(content)
    assert reason in (None, Reason.MALFORMED_CERTIFICATE)
