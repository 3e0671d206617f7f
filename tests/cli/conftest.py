"""A real Coordinator server on loopback with the emulated SNP TEE, and a workspace for it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contrast.atls.identity import TlsIdentity
from contrast.atls.issuers import EmulatedSnpIssuer, TeeKind
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Coordinator, utc_now
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.history.history import History
from contrast.history.store import FileSystemStore
from contrast.local.workspace import DemoWorkload, emulated_reference_values, write_workspace
from contrast.manifest.verifier import workload_verifier

COORDINATOR = DemoWorkload("coordinator", role="coordinator")
WEB = DemoWorkload("web")
ROGUE = DemoWorkload("rogue")


@dataclass
class Cluster:
    """A workspace and a way to (re)start its Coordinator on the same state."""

    workspace: Path
    tee_dir: Path
    state_dir: Path
    start: Callable[[], CoordinatorServer]

    @property
    def servers(self) -> list[CoordinatorServer]:
        return _servers

    @property
    def user_api(self) -> str:
        return f"127.0.0.1:{self.servers[-1].ports.user_api}"

    @property
    def mesh_api(self) -> str:
        return f"127.0.0.1:{self.servers[-1].ports.mesh_api}"


_servers: list[CoordinatorServer] = []


@pytest.fixture(scope="session")
def tee_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tee")
    EmulatedSnp(directory)
    return directory


@pytest.fixture
def cluster(tmp_path: Path, tee_dir: Path) -> Iterator[Cluster]:
    workspace = tmp_path / "workspace"
    write_workspace(
        workspace,
        emulated_reference_values(TeeKind.EMULATED_SNP, tee_dir),
        [COORDINATOR, WEB],
    )
    state_dir = tmp_path / "state"

    def start() -> CoordinatorServer:
        for running in _servers:
            running.stop(grace=0)
        coordinator = Coordinator(
            History(FileSystemStore(state_dir)), verifier_for=workload_verifier
        )
        issuer = EmulatedSnpIssuer(EmulatedSnp(tee_dir), COORDINATOR.policy_hash)
        server = CoordinatorServer(
            coordinator,
            issuer,
            TlsIdentity.generate(now=utc_now()),
            host="127.0.0.1",
            ports=Ports(0, 0, 0),
        )
        server.start()
        _servers.append(server)
        return server

    start()
    yield Cluster(workspace, tee_dir, state_dir, start)
    for server in _servers:
        server.stop(grace=0)
    _servers.clear()
