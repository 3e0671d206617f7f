"""Three `contrast coordinator` processes on one ConfigMap history (the fake API server), each
listing the others with `--peer`: one gets the manifest, the other two recover from it, and a
replica killed with SIGKILL and started again is ready through peer recovery with no operator
step, issuing certificates from the same mesh CA.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.api import meshapi_pb2, services, userapi_pb2
from contrast.api.convert import evidence_to_proto
from contrast.atls.reportdata import public_key_der, report_data
from contrast.local.processes import free_port
from tests.coordinator.conftest import Deployment, policy_hash
from tests.coordinator.program import CoordinatorProcess
from tests.kube.fakeapi import running, write_kubeconfig

REPLICAS = 3
# How long a replica may take to become ready: a bound on waiting, not a measured property.
READY_WITHIN = 90.0


@dataclass(frozen=True)
class Replica:
    user_api: int
    mesh_api: int
    http: int

    def flags(self, peers: list[Replica], kubeconfig: Path) -> list[str]:
        return [
            "--user-api-port", str(self.user_api), "--mesh-api-port", str(self.mesh_api),
            "--http-port", str(self.http), "--history", "configmaps", "--namespace", "contrast",
            "--kubeconfig", str(kubeconfig), "--peer-interval", "0.2",
            *(f"--peer=127.0.0.1:{peer.mesh_api}" for peer in peers if peer != self),
        ]  # fmt: skip


def readiness(program: CoordinatorProcess) -> str:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{program.http}/probe/readiness", timeout=5
        ) as response:
            return str(response.read().decode().strip())
    except urllib.error.HTTPError as error:
        return f"{error.code} {error.read().decode().strip()}"


def wait_ready(program: CoordinatorProcess) -> None:
    deadline = time.monotonic() + READY_WITHIN
    while (state := readiness(program)) != "ready":
        assert program.process.poll() is None, b"".join(program.lines).decode()[-3000:]
        assert time.monotonic() < deadline, f"not ready: {state}"
        time.sleep(0.1)


def mesh_ca(program: CoordinatorProcess, deployment: Deployment) -> bytes:
    """A certificate for the web workload from this replica; the mesh CA it chains to."""
    channel = program.channel(services.MESH_API)
    nonce = services.GET_NONCE.client(channel)(meshapi_pb2.GetNonceRequest(), timeout=20).Nonce
    key = ec.generate_private_key(ec.SECP256R1())
    public_key = public_key_der(key.public_key())
    evidence = deployment.issuer("web").issue(report_data(public_key, nonce))
    request = meshapi_pb2.NewMeshCertRequest(
        Nonce=nonce, PublicKey=public_key, Evidence=evidence_to_proto(evidence)
    )
    response = services.NEW_MESH_CERT.client(channel)(request, timeout=20)
    return bytes(response.MeshCACert)


@pytest.fixture
def cluster(deployment: Deployment, tmp_path: Path, tee_dir: Path) -> Iterator[_Cluster]:
    with running() as server:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.host)
        cluster = _Cluster(deployment, tmp_path, tee_dir, kubeconfig)
        try:
            yield cluster
        finally:
            cluster.stop()


class _Cluster:
    def __init__(self, deployment: Deployment, tmp_path: Path, tee_dir: Path, kubeconfig: Path):
        self.deployment = deployment
        self.tmp_path = tmp_path
        self.tee_dir = tee_dir
        self.kubeconfig = kubeconfig
        self.replicas = [Replica(free_port(), free_port(), free_port()) for _ in range(REPLICAS)]
        self.programs: list[CoordinatorProcess | None] = [None] * REPLICAS

    def start(self, index: int) -> CoordinatorProcess:
        flags = self.replicas[index].flags(self.replicas, self.kubeconfig)
        program = CoordinatorProcess.start(
            self.tmp_path / f"unused-{index}",
            self.tee_dir,
            policy_hash(self.deployment.policies["coordinator"]),
            flags,
        )
        self.programs[index] = program
        return program

    def stop(self) -> None:
        for program in self.programs:
            if program is not None and program.process.poll() is None:
                program.process.kill()
                program.process.wait()


def test_a_killed_replica_rejoins_by_peer_recovery(
    cluster: _Cluster, deployment: Deployment
) -> None:
    programs = [cluster.start(index) for index in range(REPLICAS)]
    request = userapi_pb2.SetManifestRequest(
        Manifest=deployment.manifest(), Policies=deployment.documents()
    )
    assert programs[0].call(services.SET_MANIFEST, request.SerializeToString()) == (
        grpc.StatusCode.OK
    )
    for program in programs:
        wait_ready(program)
    first = mesh_ca(programs[0], deployment)
    assert {mesh_ca(program, deployment) for program in programs} == {first}

    for index in (1, 0):  # a replica that recovered from a peer, then the one that was set
        programs[index].process.kill()  # SIGKILL: no chance to clean up
        programs[index].process.wait()
        others = [program for i, program in enumerate(programs) if i != index]
        assert {mesh_ca(program, deployment) for program in others} == {first}  # still issuing
        programs[index] = cluster.start(index)
        wait_ready(programs[index])
        assert mesh_ca(programs[index], deployment) == first
        messages = [json.loads(line)["message"] for line in programs[index].stop()]
        assert any(
            m.startswith("recovered from the peer Coordinator at 127.0.0.1:") for m in messages
        )
        assert not any("recovered from a seed share" in m for m in messages)
        programs[index] = cluster.start(index)  # and once more, for the next round
        wait_ready(programs[index])
