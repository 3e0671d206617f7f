"""The transit engine's TLS: a mesh certificate for the server, mesh certificates from clients.

As the original: the server's certificate is a mesh certificate (for `coordinator` and the other
names below) issued by the active manifest's mesh CA for a key this process draws, so a workload
trusts it through the `mesh-ca.pem` its Initializer wrote; a client must present a certificate of
the same mesh CA, or the handshake fails. The context is chosen per connection from the state at
that moment, so a new manifest (a new mesh CA) takes effect for the next connection.

Without a state (no manifest, recovery mode) there is no mesh CA to prove anything with. The
original then fails every handshake, which a client reports as a bare TLS error; here the server
completes the handshake with a self-signed certificate that no workload trusts and answers every
request with 503 and the reason, which a client that does not verify (curl -k, an operator)
can read, while a verifying client refuses the certificate as it should.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from contrast.ca.authority import CertificateAuthority, subject_alternative_names

# The Services that reach the Coordinator (release.py) and a port-forward on this machine.
DEFAULT_SANS = ("coordinator", "coordinator-ready", "localhost")
NOT_SERVING_NAME = "contrast-coordinator-transit-not-serving"
# The server's certificate is reissued this often, well within its CA's leaf validity (a year).
REISSUE_AFTER = timedelta(days=7)


@dataclass(frozen=True)
class _Issued:
    authority: CertificateAuthority
    issued_at: datetime
    context: ssl.SSLContext


class TransitTls:
    """Server TLS contexts: one for the active mesh CA (cached), one while not serving."""

    def __init__(self, *, sans: Sequence[str] = DEFAULT_SANS) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._sans = tuple(sans)
        self._lock = threading.Lock()
        self._issued: _Issued | None = None
        self._not_serving: ssl.SSLContext | None = None

    def serving(self, authority: CertificateAuthority, now: datetime) -> ssl.SSLContext:
        """The context for clients of `authority`'s mesh: client certificates required."""
        with self._lock:
            issued = self._issued
            if (
                issued is not None
                and issued.authority is authority
                and now - issued.issued_at < REISSUE_AFTER
            ):
                return issued.context
            leaf = authority.issue_mesh_certificate(self._key.public_key(), self._sans, now=now)
            chain = leaf.public_bytes(serialization.Encoding.PEM) + authority.intermediate_pem
            context = _server_context(chain, self._key)
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cadata=authority.mesh_ca_pem.decode())
            self._issued = _Issued(authority, now, context)
            return context

    def not_serving(self, now: datetime) -> ssl.SSLContext:
        """The context without a mesh CA: a self-signed certificate, no client certificate."""
        with self._lock:
            if self._not_serving is None:
                certificate = _self_signed(self._key, self._sans, now)
                self._not_serving = _server_context(
                    certificate.public_bytes(serialization.Encoding.PEM), self._key
                )
            return self._not_serving


def _server_context(chain_pem: bytes, key: ec.EllipticCurvePrivateKey) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _load_chain(context, chain_pem, key_pem)
    return context


def _load_chain(context: ssl.SSLContext, chain_pem: bytes, key_pem: bytes) -> None:
    """`load_cert_chain` reads only files: anonymous memory files, so the key touches no disk."""
    descriptors = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("chain", "key")]
    try:
        for descriptor, data in zip(descriptors, (chain_pem, key_pem), strict=True):
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
        chain_path, key_path = (f"/proc/self/fd/{descriptor}" for descriptor in descriptors)
        context.load_cert_chain(chain_path, key_path)
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def _self_signed(
    key: ec.EllipticCurvePrivateKey, sans: Sequence[str], now: datetime
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NOT_SERVING_NAME)])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(subject_alternative_names(sans)), False)
        .sign(key, hashes.SHA256())
    )
