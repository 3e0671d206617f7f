"""A TLS identity whose key a TEE vouches for.

The Coordinator serves TLS with a fresh P-256 key and a self-signed certificate. The certificate
itself proves nothing; callers ask the Coordinator to attest SHA-512(its public key ‖ their nonce)
and from then on trust exactly that key (see `contrast.atls.client`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from contrast.atls.reportdata import public_key_der

# The name TLS clients check; they pin the certificate, so it is a label, not a DNS name.
SERVER_NAME = "contrast-coordinator"
VALIDITY = timedelta(days=365)


@dataclass(frozen=True)
class TlsIdentity:
    key: ec.EllipticCurvePrivateKey = field(repr=False)
    certificate: x509.Certificate

    @classmethod
    def generate(cls, *, now: datetime) -> TlsIdentity:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME)])
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVER_NAME)]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    @property
    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def public_key_der(self) -> bytes:
        return public_key_der(self.key.public_key())
