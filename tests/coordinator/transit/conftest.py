"""A Coordinator with its transit engine on loopback, and workloads holding real mesh certificates.

Each workload's files are what its Initializer writes (`contrast.initializer.files`), so a client
is configured exactly as the original's Vault how-to configures the seal: `certChain.pem`,
`key.pem` and `mesh-ca.pem` from `/contrast/tls-config`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.atls.reportdata import public_key_der, report_data
from contrast.coordinator.core import Coordinator
from contrast.coordinator.transit.server import TransitServer
from contrast.initializer.files import CERT_CHAIN, KEY, MESH_CA, WorkloadFiles
from tests.coordinator.conftest import Deployment

# The manifest's entries: the Coordinator and two workloads with their own workload secret IDs.
NAMES = ("coordinator", "web", "client")


@dataclass(frozen=True)
class Workload:
    """A workload's `/contrast` directory, as its Initializer left it."""

    directory: Path
    workload_secret_id: str

    @property
    def cert(self) -> tuple[str, str]:
        return str(self.directory / CERT_CHAIN), str(self.directory / KEY)

    @property
    def mesh_ca(self) -> str:
        return str(self.directory / MESH_CA)


def workload(coordinator: Coordinator, deployment: Deployment, name: str, where: Path) -> Workload:
    """`name`'s mesh certificate, obtained as the Initializer obtains it (attested key, nonce)."""
    key = ec.generate_private_key(ec.SECP256R1())
    nonce = coordinator.new_nonce()
    public_key = public_key_der(key.public_key())
    evidence = deployment.issuer(name).issue(report_data(public_key, nonce))
    issued = coordinator.new_mesh_certificate(nonce, public_key, evidence)
    files = WorkloadFiles(issued.mesh_ca, issued.cert_chain, issued.root_ca, key, None)
    files.write(where)
    return Workload(where, f"core/v1/Pod/default/{name}")


@dataclass
class Running:
    coordinator: Coordinator
    server: TransitServer
    seed: bytes
    salt: bytes

    @property
    def url(self) -> str:
        return f"https://localhost:{self.server.port}"


def serve(coordinator: Coordinator) -> TransitServer:
    server = TransitServer(coordinator.active_state, host="127.0.0.1", port=0)
    server.start()
    return server


@pytest.fixture
def running(deployment: Deployment) -> Iterator[Running]:
    """A Coordinator with the first manifest set, serving its transit engine."""
    coordinator = deployment.coordinator()
    result = coordinator.set_manifest(deployment.manifest(NAMES), deployment.documents(NAMES))
    assert result.seed_shares is not None
    server = serve(coordinator)
    try:
        yield Running(
            coordinator,
            server,
            result.seed_shares.decrypt(deployment.seedshare),
            result.seed_shares.salt,
        )
    finally:
        server.stop()
