"""Clients of a pod's service mesh from outside it: what a user (or an outsider) sees.

`tls_probe` speaks TLS to a sidecar's listener, checking the server's chain against a mesh CA
(the one `contrast verify` saved) and its name, with or without a client certificate chain;
`plain_probe` speaks plain HTTP. Each says what the server answered, or how it refused, and which
certificate the server showed before it did. `ClientIdentity.forged` makes the outsider's best
forgery: a CA with the mesh CA's subject but a key of its own, and a leaf with the workload's
names. Used by `contrast demo --kubernetes` and tests/kube/test_mesh_app_on_cluster.py.
"""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

PROBE_TIMEOUT = 10


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate chain and key (PEM), as a sidecar holds them."""

    chain: bytes
    key: bytes

    @classmethod
    def forged(cls, subject_of: x509.Certificate, names: tuple[str, ...]) -> ClientIdentity:
        """A chain that looks like the mesh's: a CA with the mesh CA's subject but a key of its
        own, and a leaf with the workload's names, signed by it."""
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP384R1())
        ca = (
            x509.CertificateBuilder()
            .subject_name(subject_of.subject)
            .issuer_name(subject_of.subject)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        return cls(
            leaf.public_bytes(pem) + ca.public_bytes(pem),
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        )


@dataclass(frozen=True)
class ProbeResult:
    """What one client saw: the server's leaf (if the handshake got that far) and either the
    HTTP answer or the refusal."""

    answer: str = ""
    refusal: str = ""
    server_leaf: x509.Certificate | None = field(default=None, compare=False)

    @property
    def refused(self) -> bool:
        return bool(self.refusal)

    @property
    def by_alert(self) -> bool:
        """Refused by a TLS alert: the server itself was reached and said no (a connection
        reset or closed on the way, by a relay say, is not that)."""
        return "_ALERT_" in self.refusal

    def json(self) -> dict[str, object]:
        body = self.answer.partition("\r\n\r\n")[2]
        document: dict[str, object] = json.loads(body)
        return document


def _http(stream: socket.socket | ssl.SSLSocket, path: str, body: bytes | None) -> str:
    """One HTTP/1.0 request (POST with `body`, else GET) and the whole answer."""
    if body is None:
        stream.sendall(f"GET {path} HTTP/1.0\r\nHost: mesh\r\n\r\n".encode())
    else:
        head = f"POST {path} HTTP/1.0\r\nHost: mesh\r\nContent-Length: {len(body)}\r\n\r\n"
        stream.sendall(head.encode() + body)
    chunks = []
    while data := stream.recv(65536):
        chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def tls_probe(
    port: int,
    *,
    server_name: str,
    mesh_ca: bytes,
    client: ClientIdentity | None = None,
    path: str = "/",
    body: bytes | None = None,
) -> ProbeResult:
    """GET (or with `body` POST) `path` over TLS to 127.0.0.1:`port`, checking the server's
    chain against `mesh_ca` and its name against `server_name`; with `client`, presenting that
    chain."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=mesh_ca.decode())
    with tempfile.TemporaryDirectory(prefix="mesh-probe-") as scratch:
        if client is not None:
            chain, key = Path(scratch, "chain.pem"), Path(scratch, "key.pem")
            chain.write_bytes(client.chain)
            key.write_bytes(client.key)
            context.load_cert_chain(chain, key)
        leaf = None
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT) as raw,
                context.wrap_socket(raw, server_hostname=server_name) as tls,
            ):
                der = tls.getpeercert(binary_form=True)
                leaf = x509.load_der_x509_certificate(der) if der else None
                answer = _http(tls, path, body)
        except (OSError, ssl.SSLError) as error:
            return ProbeResult(refusal=f"{error.__class__.__name__}: {error}", server_leaf=leaf)
    if not answer:
        return ProbeResult(refusal="connection closed without an answer", server_leaf=leaf)
    return ProbeResult(answer=answer, server_leaf=leaf)


def plain_probe(port: int, path: str = "/") -> ProbeResult:
    """GET `path` in plain HTTP (no TLS at all) to 127.0.0.1:`port`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT) as raw:
            answer = _http(raw, path, None)
    except OSError as error:
        return ProbeResult(refusal=f"{error.__class__.__name__}: {error}")
    if not answer.startswith("HTTP/"):
        return ProbeResult(refusal=f"no HTTP answer (got {answer[:40]!r})")
    return ProbeResult(answer=answer)
