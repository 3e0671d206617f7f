"""Root CA, intermediate and mesh CA, and the mesh certificates of attested workloads.

The hierarchy is the original's (`internal/ca`): the root key comes from the seed, so the root CA
survives restarts and trusts every future manifest; the mesh key is random per manifest, so a mesh
CA pins one manifest. The intermediate and the mesh CA share the mesh key and subject: a leaf
verifies against the mesh CA directly, or against the root through the intermediate.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property, lru_cache
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

ROOT_COMMON_NAME = "system:coordinator:root"
INTERMEDIATE_COMMON_NAME = "system:coordinator:intermediate"
WORKLOAD_SECRET_ID_OID = ObjectIdentifier("1.3.9901.3.1")

CA_VALIDITY = timedelta(days=3650)
LEAF_VALIDITY = timedelta(days=365)
# Certificates start an hour in the past so that peers with a slightly slow clock accept them.
BACKDATE = timedelta(hours=1)
# Distinct SAN lists whose X.509 form is kept (one per manifest entry in use is enough).
SAN_CACHE_SIZE = 256


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _ca_builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    now: datetime,
    signer_key: ec.EllipticCurvePrivateKey,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()),
            critical=False,
        )
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Signing only; CAs also sign certificates and CRLs."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def subject_alternative_names(sans: Sequence[str]) -> list[x509.GeneralName]:
    """The manifest's SAN strings as X.509 names: IP addresses, URIs with a scheme, else DNS."""
    names: list[x509.GeneralName] = []
    for san in sans:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(san)))
            continue
        except ValueError:
            pass
        if urlsplit(san).scheme and "://" in san:
            names.append(x509.UniformResourceIdentifier(san))
        else:
            names.append(x509.DNSName(san))
    return names


@lru_cache(maxsize=SAN_CACHE_SIZE)
def _san_extension(sans: tuple[str, ...]) -> x509.SubjectAlternativeName:
    """The extension for a manifest entry's SANs, converted once per distinct list.

    Keyed by every string of the list, so a different list (one character differs) is a miss;
    bounded, since a manifest has a bounded number of entries but replaced manifests add more.
    Converting (trial IP parses, URL splits) was about a twentieth of issuing a leaf.
    """
    return x509.SubjectAlternativeName(subject_alternative_names(sans))


@dataclass(frozen=True)
class CertificateAuthority:
    """The three CA certificates of one Coordinator state, minted at `now`."""

    root_key: ec.EllipticCurvePrivateKey = field(repr=False)
    mesh_key: ec.EllipticCurvePrivateKey = field(repr=False)
    root: x509.Certificate
    intermediate: x509.Certificate
    mesh_ca: x509.Certificate

    @classmethod
    def create(
        cls,
        root_key: ec.EllipticCurvePrivateKey,
        mesh_key: ec.EllipticCurvePrivateKey,
        *,
        now: datetime,
    ) -> CertificateAuthority:
        root_name = _name(ROOT_COMMON_NAME)
        mesh_name = _name(INTERMEDIATE_COMMON_NAME)
        root = _ca_builder(root_name, root_name, root_key, now, root_key).sign(
            root_key, hashes.SHA384()
        )
        intermediate = _ca_builder(mesh_name, root_name, mesh_key, now, root_key).sign(
            root_key, hashes.SHA384()
        )
        mesh_ca = _ca_builder(mesh_name, mesh_name, mesh_key, now, mesh_key).sign(
            mesh_key, hashes.SHA384()
        )
        return cls(root_key, mesh_key, root, intermediate, mesh_ca)

    @cached_property
    def _leaf_issuer(self) -> x509.Name:
        """The mesh CA's subject, parsed once: every leaf names it as issuer."""
        return self.mesh_ca.subject

    @cached_property
    def _leaf_authority_key_identifier(self) -> x509.AuthorityKeyIdentifier:
        """Hashed once per CA rather than per leaf (about a tenth of issuing one)."""
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(self.mesh_key.public_key())

    # The PEM forms go into every NewMeshCert answer: encoded once per CA, not per certificate.
    @cached_property
    def root_pem(self) -> bytes:
        return self.root.public_bytes(serialization.Encoding.PEM)

    @cached_property
    def intermediate_pem(self) -> bytes:
        return self.intermediate.public_bytes(serialization.Encoding.PEM)

    @cached_property
    def mesh_ca_pem(self) -> bytes:
        return self.mesh_ca.public_bytes(serialization.Encoding.PEM)

    @cached_property
    def _leaf_template(self) -> x509.CertificateBuilder:
        """What every leaf of this CA shares: issuer and the fixed extensions, in their order.

        Builders are immutable (each call returns a new one), so one template serves every
        thread; building it per leaf was a tenth of issuing one.
        """
        return (
            x509.CertificateBuilder()
            .issuer_name(self._leaf_issuer)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]
                ),
                critical=False,
            )
            .add_extension(self._leaf_authority_key_identifier, critical=False)
        )

    def issue_mesh_certificate(
        self,
        public_key: CertificateIssuerPublicKeyTypes,
        sans: Sequence[str],
        *,
        now: datetime,
        workload_secret_id: str | None = None,
        extensions: Sequence[x509.Extension[x509.ExtensionType]] = (),
    ) -> x509.Certificate:
        """A leaf for `public_key`, the key bound in the workload's verified evidence."""
        common_name = sans[0] if sans else "contrast-workload"
        builder = (
            self._leaf_template.subject_name(_name(common_name))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + LEAF_VALIDITY)
        )
        if sans:
            builder = builder.add_extension(_san_extension(tuple(sans)), critical=False)
        if workload_secret_id:
            builder = builder.add_extension(
                x509.UnrecognizedExtension(
                    WORKLOAD_SECRET_ID_OID, _der_octet_string(workload_secret_id.encode())
                ),
                critical=False,
            )
        for extension in extensions:
            builder = builder.add_extension(extension.value, critical=extension.critical)
        return builder.sign(self.mesh_key, hashes.SHA384())


def _der_octet_string(content: bytes) -> bytes:
    """DER OCTET STRING (tag 0x04) with a definite length, as the original encodes the id."""
    length = len(content)
    if length < 0x80:
        header = bytes([0x04, length])
    else:
        size = (length.bit_length() + 7) // 8
        header = bytes([0x04, 0x80 | size]) + length.to_bytes(size, "big")
    return header + content
