"""The user's side of examples/mesh-app on the test cluster: its image, and TLS clients of its mesh.

`push_app_image` builds the example's image as `examples/mesh-app/build_image.py` does (the
release base layer plus the app's layer) and pushes it by digest, as the release images are;
`node_public_roots` is the node's emulated roots' public part, which a user passes to
`generate --emulated-tee` as they would pass AMD's or Intel's roots. `tls_probe` is a client
outside the mesh, on the workstation through the port-forwarder pod: with or without a client
certificate, or plain TCP; it says what the server answered or how it refused, and which chain
the server showed. `pod_secrets` reads a pod's `/contrast` as the node sees it (the emulated
runtime has no memory encryption: the node's root reads every pod's files).
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import re
import socket
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.kube.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mesh-app"
APP_FILES = ("web.yml", "api.yml", "db.yml")
PROBE_TIMEOUT = 10


def build_image_module() -> ModuleType:
    """examples/mesh-app/build_image.py, which a user runs as a script (its folder is no
    package)."""
    spec = importlib.util.spec_from_file_location(
        "mesh_app_build_image", EXAMPLE / "build_image.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def push_app_image(release_layout: Path, registry: str, directory: Path) -> tuple[str, str]:
    """Builds the app's image into `directory` and copies it into `registry` by digest;
    returns (the example's reference, the pushed digest reference)."""
    builder = build_image_module()
    layout = directory / "mesh-app-layout"
    builder.build(release_layout, layout)
    reference: str = builder.REFERENCE
    digest_file = directory / "mesh-app.digest"
    subprocess.run(
        [
            "skopeo", "copy", "--quiet", "--dest-tls-verify=false",
            "--digestfile", str(digest_file),
            f"oci:{layout}:{reference}", f"docker://{registry}/mesh-app:1.0",
        ],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return reference, f"{registry}/mesh-app@{digest_file.read_text().strip()}"


def node_public_roots(directory: Path) -> Path:
    """The node's emulated roots of trust, public part only (`contrast-emulated-runtime setup
    --public`), as `cluster.sh install-runtime` created them on this machine's one node."""
    subprocess.run(
        [sys.executable, "-m", "contrast.emulatedruntime", "setup", "--public", str(directory)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return directory


def pod_names(cluster: Cluster, namespace: str, selector: str) -> list[str]:
    result = cluster.kubectl(
        "-n", namespace, "get", "pods", "-l", selector, "-o", "jsonpath={.items[*].metadata.name}"
    )  # fmt: skip
    return result.stdout.decode().split()


def pod_secrets(cluster: Cluster, namespace: str, pod: str) -> Path:
    """The node's directory of a pod's `contrast-secrets` volume (its `/contrast`)."""
    uid = cluster.kubectl(
        "-n", namespace, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}"
    ).stdout.decode().strip()  # fmt: skip
    volumes = cluster.directory / "kubelet/pods" / uid / "volumes"
    return volumes / "kubernetes.io~empty-dir/contrast-secrets"


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate chain and key (PEM), as a sidecar holds them."""

    chain: bytes
    key: bytes

    @classmethod
    def of_pod(cls, secrets: Path) -> ClientIdentity:
        tls = secrets / "tls-config"
        return cls((tls / "certChain.pem").read_bytes(), (tls / "key.pem").read_bytes())

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


@contextlib.contextmanager
def port_forward(
    cluster: Cluster, namespace: str, target: str, ports: tuple[int, ...]
) -> Iterator[dict[int, int]]:
    """`kubectl port-forward TARGET :P...` for the duration; yields {remote port: local port}."""
    process = subprocess.Popen(
        [
            str(cluster.kubectl_path), "--kubeconfig", str(cluster.kubeconfig),
            "-n", namespace, "port-forward", "--address", "127.0.0.1", target,
            *(f":{port}" for port in ports),
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        local: dict[int, int] = {}
        while len(local) < len(ports):
            line = process.stdout.readline().decode()
            match = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)", line)
            if not match:
                process.kill()
                _, stderr = process.communicate(timeout=10)
                pytest.fail(
                    f"kubectl port-forward {target}: {line}{stderr.decode(errors='replace')}"
                )
            local[int(match.group(2))] = int(match.group(1))
        yield local
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        if process.poll() is None:
            process.kill()
            process.wait()
