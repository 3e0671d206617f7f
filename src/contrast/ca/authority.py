"""Root CA, intermediate and mesh CA, and the mesh certificates of attested workloads.

The hierarchy is the original's (`internal/ca`): the root key comes from the seed, so the root CA
survives restarts and trusts every future manifest; the mesh key is random per manifest, so a mesh
CA pins one manifest. The intermediate and the mesh CA share the mesh key and subject: a leaf
verifies against the mesh CA directly, or against the root through the intermediate.
"""

from __future__ import annotations

import base64
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
from cryptography.x509.oid import (
    ExtendedKeyUsageOID,
    ExtensionOID,
    NameOID,
    ObjectIdentifier,
    SignatureAlgorithmOID,
)

from contrast.ca import der

ROOT_COMMON_NAME = "system:coordinator:root"
INTERMEDIATE_COMMON_NAME = "system:coordinator:intermediate"
WORKLOAD_SECRET_ID_OID = ObjectIdentifier("1.3.9901.3.1")

CA_VALIDITY = timedelta(days=3650)
LEAF_VALIDITY = timedelta(days=365)
# Certificates start an hour in the past so that peers with a slightly slow clock accept them.
BACKDATE = timedelta(hours=1)
# Distinct SAN lists whose X.509 form is kept (one per manifest entry in use is enough).
SAN_CACHE_SIZE = 256

# TBSCertificate framing of a leaf: [0] EXPLICIT version v3, [3] EXPLICIT extensions.
_LEAF_VERSION = der.tlv(0xA0, der.integer(2))
_EXTENSIONS_TAG = 0xA3
# AlgorithmIdentifier ecdsa-with-SHA384, no parameters (RFC 5758 3.2): the mesh key is P-384.
_SIGNATURE_ALGORITHM = der.tlv(
    der.SEQUENCE, der.object_identifier(SignatureAlgorithmOID.ECDSA_WITH_SHA384)
)
_LEAF_FIXED_OIDS = frozenset(
    {
        ExtensionOID.BASIC_CONSTRAINTS,
        ExtensionOID.KEY_USAGE,
        ExtensionOID.EXTENDED_KEY_USAGE,
        ExtensionOID.AUTHORITY_KEY_IDENTIFIER,
    }
)
_SAN = frozenset({ExtensionOID.SUBJECT_ALTERNATIVE_NAME})
_ECDSA_SHA384 = ec.ECDSA(hashes.SHA384())


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


@dataclass(frozen=True)
class _EntryParts:
    """What every leaf for one manifest entry's SAN list shares, DER-encoded by cryptography."""

    subject: bytes
    san_extension: bytes  # the whole Extension, empty for an entry without SANs


@lru_cache(maxsize=SAN_CACHE_SIZE)
def _entry_parts(sans: tuple[str, ...]) -> _EntryParts:
    """The subject and SAN extension of a leaf for `sans`, encoded once per distinct list.

    Keyed by every string of the list, so a different list (one character differs) is a miss;
    bounded, since a manifest has a bounded number of entries but replaced manifests add more.
    Converting (trial IP parses, URL splits) was about a twentieth of issuing a leaf.
    """
    common_name = sans[0] if sans else "contrast-workload"
    san_extension = b""
    if sans:
        value = x509.SubjectAlternativeName(subject_alternative_names(sans))
        san_extension = der.extension(value.oid, critical=False, value=value.public_bytes())
    return _EntryParts(_name(common_name).public_bytes(), san_extension)


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
    def _leaf_head(self) -> tuple[bytes, bytes]:
        """The TBSCertificate's fixed parts around the serial: version, and algorithm + issuer.

        The mesh CA's subject is encoded once per CA: every leaf names it as issuer.
        """
        return _LEAF_VERSION, _SIGNATURE_ALGORITHM + self.mesh_ca.subject.public_bytes()

    @cached_property
    def _leaf_fixed_extensions(self) -> bytes:
        """The extensions every leaf of this CA carries first, in their order, encoded once.

        The authority key identifier is hashed once per CA rather than per leaf (it was about a
        tenth of issuing one), and encoding these four per leaf was about a fifth.
        """
        fixed: list[tuple[x509.ExtensionType, bool]] = [
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (_key_usage(ca=False), True),
            (
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]
                ),
                False,
            ),
            (x509.AuthorityKeyIdentifier.from_issuer_public_key(self.mesh_key.public_key()), False),
        ]
        return b"".join(
            der.extension(value.oid, critical=critical, value=value.public_bytes())
            for value, critical in fixed
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
        """A leaf for `public_key` (see `issue_mesh_certificate_der`), as a certificate object."""
        return x509.load_der_x509_certificate(
            self.issue_mesh_certificate_der(
                public_key,
                sans,
                now=now,
                workload_secret_id=workload_secret_id,
                extensions=extensions,
            )
        )

    def issue_mesh_certificate_der(
        self,
        public_key: CertificateIssuerPublicKeyTypes,
        sans: Sequence[str],
        *,
        now: datetime,
        workload_secret_id: str | None = None,
        extensions: Sequence[x509.Extension[x509.ExtensionType]] = (),
    ) -> bytes:
        """A leaf for `public_key`, the key bound in the workload's verified evidence, in DER.

        The Coordinator sends the leaf as PEM (`pem_certificate`) and never reads it back, so it
        takes the bytes: parsing them into a certificate object only to encode them again cost
        about a twentieth of issuing a leaf.

        The TBSCertificate is the one `CertificateBuilder` would encode (tests/ca hold the two
        byte for byte), assembled from parts encoded once per CA and per SAN list and signed with
        one ECDSA P-384 signature: through the builder, re-encoding the name and the six
        extensions on every call cost a third as much as the signature itself.
        """
        version, algorithm_and_issuer = self._leaf_head
        entry = _entry_parts(tuple(sans))
        own = [entry.san_extension]
        if workload_secret_id:
            own.append(_secret_id_extension(workload_secret_id))
        seen = {WORKLOAD_SECRET_ID_OID} if workload_secret_id else set()
        for extra in extensions:
            if extra.oid in seen or extra.oid in _LEAF_FIXED_OIDS or (sans and extra.oid in _SAN):
                raise ValueError(f"the extension {extra.oid.dotted_string} is already in the leaf")
            seen.add(extra.oid)
            own.append(
                der.extension(extra.oid, critical=extra.critical, value=extra.value.public_bytes())
            )
        validity = der.tlv(der.SEQUENCE, der.time(now - BACKDATE) + der.time(now + LEAF_VALIDITY))
        key = public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        extension_list = der.tlv(der.SEQUENCE, self._leaf_fixed_extensions + b"".join(own))
        tbs = der.tlv(
            der.SEQUENCE,
            version
            + der.integer(x509.random_serial_number())
            + algorithm_and_issuer
            + validity
            + entry.subject
            + key
            + der.tlv(_EXTENSIONS_TAG, extension_list),
        )
        signature = self.mesh_key.sign(tbs, _ECDSA_SHA384)
        return der.tlv(
            der.SEQUENCE,
            tbs + _SIGNATURE_ALGORITHM + der.tlv(der.BIT_STRING, b"\x00" + signature),
        )


def pem_certificate(certificate_der: bytes) -> bytes:
    """A DER certificate as PEM, byte for byte what cryptography's `public_bytes(PEM)` writes:
    the CERTIFICATE armour around base64 in lines of 64 characters."""
    text = base64.b64encode(certificate_der)
    lines = b"\n".join(text[at : at + 64] for at in range(0, len(text), 64))
    return b"-----BEGIN CERTIFICATE-----\n" + lines + b"\n-----END CERTIFICATE-----\n"


@lru_cache(maxsize=SAN_CACHE_SIZE)
def _secret_id_extension(workload_secret_id: str) -> bytes:
    """The workload secret id's extension, encoded once per id (one per manifest entry)."""
    return der.extension(
        WORKLOAD_SECRET_ID_OID,
        critical=False,
        value=_der_octet_string(workload_secret_id.encode()),
    )


def _der_octet_string(content: bytes) -> bytes:
    """DER OCTET STRING (tag 0x04) with a definite length, as the original encodes the id."""
    length = len(content)
    if length < 0x80:
        header = bytes([0x04, length])
    else:
        size = (length.bit_length() + 7) // 8
        header = bytes([0x04, 0x80 | size]) + length.to_bytes(size, "big")
    return header + content
