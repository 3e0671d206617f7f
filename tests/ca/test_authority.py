"""CA hierarchy: mesh leaves verify against the mesh CA and, through the intermediate, the root."""

from __future__ import annotations

import base64
import ipaddress
import subprocess
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from contrast.ca.authority import (
    BACKDATE,
    INTERMEDIATE_COMMON_NAME,
    LEAF_VALIDITY,
    ROOT_COMMON_NAME,
    WORKLOAD_SECRET_ID_OID,
    CertificateAuthority,
    pem_certificate,
    subject_alternative_names,
)

NOW = datetime(2026, 11, 23, tzinfo=UTC)


@pytest.fixture(scope="module")
def authority() -> CertificateAuthority:
    return CertificateAuthority.create(
        ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1()), now=NOW
    )


def leaf_for(authority: CertificateAuthority, sans: list[str]) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    return authority.issue_mesh_certificate(
        key.public_key(), sans, now=NOW, workload_secret_id="apps/v1/Deployment/default/web"
    )


def openssl_verify(tmp_path: Path, ca: bytes, leaf: x509.Certificate, *extra: str) -> str:
    (tmp_path / "ca.pem").write_bytes(ca)
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    result = subprocess.run(
        [
            "openssl",
            "verify",
            "-attime",
            str(int(NOW.timestamp())),
            "-CAfile",
            str(tmp_path / "ca.pem"),
            *extra,
            str(tmp_path / "leaf.pem"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout + result.stderr


def test_subjects_follow_the_original(authority: CertificateAuthority) -> None:
    cn = x509.NameOID.COMMON_NAME
    assert authority.root.subject.get_attributes_for_oid(cn)[0].value == ROOT_COMMON_NAME
    assert authority.mesh_ca.subject == authority.intermediate.subject
    assert authority.mesh_ca.subject.get_attributes_for_oid(cn)[0].value == (
        INTERMEDIATE_COMMON_NAME
    )
    assert authority.mesh_ca.public_key() == authority.intermediate.public_key()


def test_leaf_verifies_against_the_mesh_ca(authority: CertificateAuthority, tmp_path: Path) -> None:
    leaf = leaf_for(authority, ["web", "*"])
    assert "leaf.pem: OK" in openssl_verify(tmp_path, authority.mesh_ca_pem, leaf)


def test_leaf_verifies_against_the_root_through_the_intermediate(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    leaf = leaf_for(authority, ["web"])
    (tmp_path / "intermediate.pem").write_bytes(authority.intermediate_pem)
    untrusted = ["-untrusted", str(tmp_path / "intermediate.pem")]
    assert "leaf.pem: OK" in openssl_verify(tmp_path, authority.root_pem, leaf, *untrusted)
    assert "OK" not in openssl_verify(tmp_path, authority.root_pem, leaf)


def test_a_leaf_from_another_authority_is_refused(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    other = CertificateAuthority.create(
        ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1()), now=NOW
    )
    assert "OK" not in openssl_verify(tmp_path, authority.mesh_ca_pem, leaf_for(other, ["web"]))


def test_sans_usages_and_workload_secret_id(authority: CertificateAuthority) -> None:
    leaf = leaf_for(authority, ["web", "*", "203.0.113.7", "spiffe://shop.example/web"])
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["web", "*"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("203.0.113.7")]
    assert names.get_values_for_type(x509.UniformResourceIdentifier) == [
        "spiffe://shop.example/web"
    ]
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH}
    secret_id = leaf.extensions.get_extension_for_oid(WORKLOAD_SECRET_ID_OID).value
    assert isinstance(secret_id, x509.UnrecognizedExtension)
    payload = b"apps/v1/Deployment/default/web"
    assert secret_id.value == bytes([0x04, len(payload)]) + payload
    assert leaf.not_valid_before_utc < NOW < leaf.not_valid_after_utc


def test_each_leaf_names_its_own_authority(authority: CertificateAuthority) -> None:
    """Issuer and authority key id are computed once per CA: never carried over to another."""
    other = CertificateAuthority.create(
        ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1()), now=NOW
    )
    for ca in (authority, other, authority, other):
        leaf = leaf_for(ca, ["web"])
        subject_key_id = ca.mesh_ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
        key_id = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        assert key_id.key_identifier == subject_key_id.value.digest
        assert leaf.issuer == ca.mesh_ca.subject
    own, others = (
        ca.mesh_ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
        for ca in (authority, other)
    )
    assert own != others  # so the loop above would notice a key id carried over


def san_strings(leaf: x509.Certificate) -> list[str]:
    extension = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return [str(name.value) for name in extension.value]


def test_san_lists_that_differ_in_one_character_each_get_their_own_names(
    authority: CertificateAuthority,
) -> None:
    """The X.509 form of a SAN list is memoised by the whole list: any change is a miss."""
    lists = [
        ["web", "10.0.0.1"],
        ["web", "10.0.0.2"],
        ["wex", "10.0.0.2"],
        ["web", "10.0.0.2", "spiffe://x"],
        ["web"],
    ]
    for _ in range(2):  # the second round is served from the memo
        for sans in lists:
            assert san_strings(leaf_for(authority, sans)) == sans


def test_each_authority_issues_under_its_own_name_and_key(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    """Per-CA constants (issuer, authority key identifier, PEM forms) belong to that CA only."""
    other = CertificateAuthority.create(
        ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1()), now=NOW
    )
    for ca in (authority, other, authority):
        leaf = leaf_for(ca, ["web"])
        identifier = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        expected = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.mesh_key.public_key())
        assert identifier == expected
        assert "leaf.pem: OK" in openssl_verify(tmp_path, ca.mesh_ca_pem, leaf)
    assert other.mesh_ca_pem != authority.mesh_ca_pem
    assert other.root_pem != authority.root_pem


def builder_leaf(  # noqa: PLR0917 (the leaf's inputs, as issue_mesh_certificate takes them)
    ca: CertificateAuthority,
    key: CertificateIssuerPublicKeyTypes,
    sans: list[str],
    now: datetime,
    serial: int,
    secret_id: str | None,
    extra: list[x509.Extension[x509.ExtensionType]],
) -> x509.Certificate:
    """The leaf as cryptography's CertificateBuilder makes it (how it was issued before)."""
    builder = (
        x509.CertificateBuilder()
        .issuer_name(ca.mesh_ca.subject)
        .subject_name(
            x509.Name(
                [x509.NameAttribute(NameOID.COMMON_NAME, sans[0] if sans else "contrast-workload")]
            )
        )
        .public_key(key)
        .serial_number(serial)
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + LEAF_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.mesh_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(subject_alternative_names(sans)), critical=False
        )
    if secret_id:
        payload = secret_id.encode()
        assert len(payload) < 0x10000
        length = (
            bytes([len(payload)])
            if len(payload) < 0x80
            else bytes([0x82]) + len(payload).to_bytes(2, "big")
        )
        builder = builder.add_extension(
            x509.UnrecognizedExtension(WORKLOAD_SECRET_ID_OID, b"\x04" + length + payload),
            critical=False,
        )
    for extension in extra:
        builder = builder.add_extension(extension.value, critical=extension.critical)
    return builder.sign(ca.mesh_key, hashes.SHA384())


LONG_SANS = [f"service-{i}.namespace.svc.cluster.local" for i in range(40)] + ["10.0.0.1", "::1"]
EXTRA = x509.Extension(
    x509.SubjectKeyIdentifier.oid, False, x509.SubjectKeyIdentifier(b"\x01" * 20)
)
CASES = [
    (ec.SECP256R1(), ["web", "*"], NOW, "apps/v1/Deployment/default/web", []),
    (ec.SECP384R1(), [], NOW, None, []),
    (ec.SECP256R1(), LONG_SANS, NOW.replace(microsecond=999_999), "x" * 300, []),
    (ec.SECP521R1(), ["203.0.113.7", "spiffe://shop/web"], datetime(2049, 6, 1, 12), None, []),
    (
        ec.SECP256R1(),
        ["db"],
        datetime(2026, 1, 1, 23, 30, tzinfo=timezone(timedelta(hours=-5))),
        "s",
        [EXTRA],
    ),
    (
        ec.SECP256R1(),
        ["*.example", "long-" + "a" * 200],
        datetime(1999, 12, 31, 23, 59, 59),
        None,
        [],
    ),
]


@pytest.mark.parametrize(("curve", "sans", "now", "secret_id", "extra"), CASES)
def test_the_leaf_is_what_the_certificate_builder_encodes(  # noqa: PLR0917
    authority: CertificateAuthority,
    curve: ec.EllipticCurve,
    sans: list[str],
    now: datetime,
    secret_id: str | None,
    extra: list[x509.Extension[x509.ExtensionType]],
) -> None:
    """The issued TBSCertificate, byte for byte, is the builder's for the same serial: names,
    validity (UTCTime before 2050, GeneralizedTime after, naive and other zones as UTC), the
    key, and every extension with its criticality in its order; the signature verifies."""
    key = ec.generate_private_key(curve).public_key()
    for ca in (authority, authority):  # the second issue is served from the memos
        leaf = ca.issue_mesh_certificate(
            key, sans, now=now, workload_secret_id=secret_id, extensions=extra
        )
        reference = builder_leaf(ca, key, sans, now, leaf.serial_number, secret_id, extra)
        assert leaf.tbs_certificate_bytes == reference.tbs_certificate_bytes
        assert leaf.signature_algorithm_oid == reference.signature_algorithm_oid
        assert leaf.verify_directly_issued_by(ca.mesh_ca) is None
        assert leaf.public_bytes(serialization.Encoding.DER).startswith(b"\x30\x82")


def test_serial_numbers_are_fresh(authority: CertificateAuthority) -> None:
    serials = {leaf_for(authority, ["web"]).serial_number for _ in range(20)}
    assert len(serials) == 20
    assert all(0 < serial < 1 << 159 for serial in serials)


def test_an_extension_given_twice_is_refused(authority: CertificateAuthority) -> None:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    san = x509.Extension(
        x509.SubjectAlternativeName.oid, False, x509.SubjectAlternativeName([x509.DNSName("a")])
    )
    with pytest.raises(ValueError, match="already in the leaf"):
        authority.issue_mesh_certificate(key, ["web"], now=NOW, extensions=[san])
    with pytest.raises(ValueError, match="already in the leaf"):
        authority.issue_mesh_certificate(key, ["web"], now=NOW, extensions=[EXTRA, EXTRA])


@pytest.mark.parametrize(("curve", "sans", "now", "secret_id", "extra"), CASES)
def test_the_leaf_pem_is_what_cryptography_writes(  # noqa: PLR0917
    authority: CertificateAuthority,
    curve: ec.EllipticCurve,
    sans: list[str],
    now: datetime,
    secret_id: str | None,
    extra: list[x509.Extension[x509.ExtensionType]],
) -> None:
    """The Coordinator sends the DER leaf as PEM without parsing it: the bytes are those of
    cryptography's PEM encoder for the parsed leaf (lengths that end a line exactly and not)."""
    key = ec.generate_private_key(curve).public_key()
    leaf = authority.issue_mesh_certificate_der(
        key, sans, now=now, workload_secret_id=secret_id, extensions=extra
    )
    parsed = x509.load_der_x509_certificate(leaf)
    assert pem_certificate(leaf) == parsed.public_bytes(serialization.Encoding.PEM)
    for size in (1, 47, 48, 49, 96):  # base64 of 48 bytes fills one 64-character line
        assert pem_certificate(bytes(range(size))) == _pem_reference(bytes(range(size)))


def _pem_reference(data: bytes) -> bytes:
    body = "\n".join(textwrap.wrap(base64.b64encode(data).decode(), 64))
    return f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n".encode()
