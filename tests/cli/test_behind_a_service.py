"""`contrast set` and `verify` through one address that leads to several Coordinator replicas.

On the cluster the user reaches the `coordinator` Service through the port-forwarder pod: every
TCP connection may go to another replica, each with a TLS key of its own. The CLI fetches the
certificate on one connection and pins it on the next; here a relay sends the second connection
it accepts to another replica than the others, as a Service may, and the CLI must still attest
(it tries the fetch and pin again), while a relay that always switches is refused.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.atls.identity import TlsIdentity
from contrast.atls.issuers import EmulatedSnpIssuer
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Coordinator, utc_now
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.history.history import History
from contrast.history.store import FileSystemStore
from contrast.initializer.client import request_mesh_certificate
from contrast.manifest.verifier import workload_verifier
from tests.cli.conftest import COORDINATOR, WEB, Cluster
from tests.cli.test_userapi import run


def second_replica(cluster: Cluster) -> CoordinatorServer:
    """Another replica on the same history, with a TLS key of its own."""
    coordinator = Coordinator(
        History(FileSystemStore(cluster.state_dir)), verifier_for=workload_verifier
    )
    issuer = EmulatedSnpIssuer(EmulatedSnp(cluster.tee_dir), COORDINATOR.policy_hash)
    server = CoordinatorServer(
        coordinator, issuer, TlsIdentity.generate(now=utc_now()), host="127.0.0.1",
        ports=Ports(0, 0, 0),
    )  # fmt: skip
    server.start()
    return server


def _pipe(source: socket.socket, destination: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            destination.sendall(data)
    with contextlib.suppress(OSError):
        destination.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def relay(choose: Callable[[int], int]) -> Iterator[str]:
    """A TCP relay on loopback: its n-th accepted connection (from 1) goes to port choose(n)."""
    listener = socket.create_server(("127.0.0.1", 0))
    count = 0

    def serve() -> None:
        nonlocal count
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            count += 1
            upstream = socket.create_connection(("127.0.0.1", choose(count)))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_set_and_verify_attest_when_the_pinned_connection_meets_another_replica(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    first = cluster.servers[-1].ports.user_api
    other = second_replica(cluster)
    try:
        second = other.ports.user_api
        workspace = str(cluster.workspace)
        # Connection 2 (the first pin) meets the other replica; the rest the first one.
        with relay(lambda n: second if n == 2 else first) as address:
            resources = str(cluster.workspace / "resources")
            code, out, err = run(
                capsys, "set", "-c", address, "--workspace-dir", workspace, resources
            )
            assert code == 0, err
            assert out.startswith("✔ Manifest set")
            code, _, err = run(capsys, "verify", "-c", address, "--workspace-dir", workspace)
            assert code == 0, err
        # A relay that sends every pin elsewhere than the fetch never gets a pinned channel.
        with relay(lambda n: first if n % 2 else second) as address:
            code, _, err = run(capsys, "verify", "-c", address, "--workspace-dir", workspace)
            assert code == 1
            assert "did not attest: UNAVAILABLE" in err
    finally:
        other.stop(grace=0)


def test_an_initializer_gets_its_certificate_when_the_pinned_connection_meets_another_replica(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Initializer behind `coordinator-ready`: the fetch on one replica, the pin on another.

    Before, one attempt failed there (UNAVAILABLE) and waited out a backoff: on the cluster with
    three replicas two requests in three failed so (bench_pod_certs).
    """
    workspace = str(cluster.workspace)
    resources = str(cluster.workspace / "resources")
    code, _, err = run(
        capsys, "set", "-c", cluster.user_api, "--workspace-dir", workspace, resources
    )
    assert code == 0, err
    first = cluster.servers[-1].ports.mesh_api
    other = second_replica(cluster)
    try:
        second = other.ports.mesh_api
        issuer = EmulatedSnpIssuer(EmulatedSnp(cluster.tee_dir), WEB.policy_hash)
        key = ec.generate_private_key(ec.SECP256R1())
        # Connection 2 (the first pin) meets the other replica; the rest the first one.
        with relay(lambda n: second if n == 2 else first) as address:
            files = request_mesh_certificate(address, issuer, key, timeout=10)
        assert files.key is key
        leaf = x509.load_pem_x509_certificate(files.cert_chain)
        mesh_ca = x509.load_pem_x509_certificate(files.mesh_ca)
        leaf.verify_directly_issued_by(mesh_ca)
        # A relay that sends every pin elsewhere than the fetch never gets a pinned channel.
        with relay(lambda n: first if n % 2 else second) as address:
            with pytest.raises(grpc.RpcError) as refused:
                request_mesh_certificate(address, issuer, key, timeout=10)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        other.stop(grace=0)
