"""Three `contrast coordinator` processes on one ConfigMap history on the test cluster's API
server (each authenticated as the Coordinator's ServiceAccount), each listing the others with
`--peer`: one gets the manifest, the other two recover from it, and a
replica killed with SIGKILL and started again is ready through peer recovery with no operator
step, issuing certificates from the same mesh CA; kills at random points of SetManifest and of
peer recovery lose nothing and fork nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
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
from contrast.manifest.ownership import sign_update
from tests.coordinator.conftest import Deployment, policy_hash
from tests.coordinator.program import CoordinatorProcess
from tests.kube.cluster import Cluster
from tests.kube.serviceaccount import grant

REPLICAS = 3
# Of each Coordinator's log, how many of the last lines a failure shows, and of each how much.
LOG_TAIL = 25
LOG_LINE_LIMIT = 600
# How long a replica may take to become ready: a bound on waiting, not a measured property.
READY_WITHIN = 90.0


@dataclass(frozen=True)
class Replica:
    user_api: int
    mesh_api: int
    http: int

    def flags(self, peers: list[Replica], kubeconfig: Path, namespace: str) -> list[str]:
        return [
            "--user-api-port", str(self.user_api), "--mesh-api-port", str(self.mesh_api),
            "--http-port", str(self.http), "--transit-port", "0", "--history", "configmaps",
            "--namespace", namespace,
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
def replica_set(
    deployment: Deployment, tmp_path: Path, tee_dir: Path, kube_cluster: Cluster
) -> Iterator[_ReplicaSet]:
    namespace = kube_cluster.namespace("replicas")
    replicas = _ReplicaSet(deployment, tmp_path, tee_dir, grant(kube_cluster, namespace), namespace)
    try:
        yield replicas
    finally:
        replicas.stop()
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


class _ReplicaSet:
    def __init__(
        self,
        deployment: Deployment,
        tmp_path: Path,
        tee_dir: Path,
        kubeconfig: Path,
        namespace: str,
    ):
        self.deployment = deployment
        self.tmp_path = tmp_path
        self.tee_dir = tee_dir
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.replicas = [Replica(free_port(), free_port(), free_port()) for _ in range(REPLICAS)]
        self.programs: list[CoordinatorProcess | None] = [None] * REPLICAS
        # The program each replica ran before its current one (killed by the test, usually).
        self.previous: list[CoordinatorProcess | None] = [None] * REPLICAS

    def start(self, index: int) -> CoordinatorProcess:
        flags = self.replicas[index].flags(self.replicas, self.kubeconfig, self.namespace)
        program = CoordinatorProcess.start(
            self.tmp_path / f"unused-{index}",
            self.tee_dir,
            policy_hash(self.deployment.policies["coordinator"]),
            flags,
        )
        self.previous[index] = self.programs[index]
        self.programs[index] = program
        return program

    def logs(self) -> str:
        """The tail of each replica's log, its current program's and the one before."""
        parts = []
        for index in range(REPLICAS):
            for which, program in (
                ("before", self.previous[index]),
                ("current", self.programs[index]),
            ):
                if program is None:
                    continue
                lines = list(program.lines)  # its reader thread may append meanwhile
                tail = lines[-LOG_TAIL:]
                text = b"".join(line[:LOG_LINE_LIMIT] for line in tail).decode(errors="replace")
                parts.append(
                    f"--- replica {index} ({which}, pid {program.process.pid},"
                    f" exit {program.process.poll()}), last {len(tail)} of {len(lines)} lines:\n"
                    f"{text}"
                )
        return "\n".join(parts)

    @contextlib.contextmanager
    def explained(self) -> Iterator[None]:
        """A failure in the block (an assertion, an RPC's error) as an AssertionError whose
        message ends with every replica's log tail: a rare failure is explained by its run."""
        try:
            yield
        except (AssertionError, grpc.RpcError) as error:
            raise AssertionError(f"{error}\n\nThe Coordinators' logs:\n{self.logs()}") from error

    def start_all_with_manifest(self) -> list[CoordinatorProcess]:
        """Every replica started, the deployment's manifest set through the first, all ready."""
        programs = [self.start(index) for index in range(REPLICAS)]
        request = userapi_pb2.SetManifestRequest(
            Manifest=self.deployment.manifest(), Policies=self.deployment.documents()
        )
        assert programs[0].call(services.SET_MANIFEST, request.SerializeToString()) == (
            grpc.StatusCode.OK
        )
        for program in programs:
            wait_ready(program)
        return programs

    def stop(self) -> None:
        for program in self.programs:
            if program is not None and program.process.poll() is None:
                program.process.kill()
                program.process.wait()


def test_a_killed_replica_rejoins_by_peer_recovery(
    replica_set: _ReplicaSet, deployment: Deployment
) -> None:
    with replica_set.explained():
        programs = replica_set.start_all_with_manifest()
        first = mesh_ca(programs[0], deployment)
        assert {mesh_ca(program, deployment) for program in programs} == {first}

        for index in (1, 0):  # a replica that recovered from a peer, then the one that was set
            programs[index].process.kill()  # SIGKILL: no chance to clean up
            programs[index].process.wait()
            others = [program for i, program in enumerate(programs) if i != index]
            assert {mesh_ca(program, deployment) for program in others} == {first}  # still issuing
            programs[index] = replica_set.start(index)
            wait_ready(programs[index])
            assert mesh_ca(programs[index], deployment) == first
            messages = [json.loads(line)["message"] for line in programs[index].stop()]
            assert any(
                m.startswith("recovered from the peer Coordinator at 127.0.0.1:") for m in messages
            )
            assert not any("recovered from a seed share" in m for m in messages)
            programs[index] = replica_set.start(index)  # and once more, for the next round
            wait_ready(programs[index])


# The issue asks for 30 rounds: `CONTRAST_KILL_ROUNDS=30` runs them (about 6 minutes on two busy
# cores, each round restarting one or two processes); the check runs 10.
KILL_ROUNDS = int(os.environ.get("CONTRAST_KILL_ROUNDS", "10"))
SETS = (("coordinator", "web"), ("coordinator", "web", "client"))


def history(program: CoordinatorProcess) -> userapi_pb2.GetManifestsResponse:
    response: userapi_pb2.GetManifestsResponse = services.GET_MANIFESTS.client(
        program.channel(services.USER_API)
    )(userapi_pb2.GetManifestsRequest(), timeout=20)
    return response


def update(
    program: CoordinatorProcess, deployment: Deployment, head: bytes, names: tuple[str, ...]
) -> grpc.StatusCode:
    manifest = deployment.manifest(names)
    request = userapi_pb2.SetManifestRequest(
        Manifest=manifest,
        Policies=deployment.documents(names),
        PreviousTransitionHash=head,
        WorkloadOwnerPublicKey=public_key_der(deployment.owner.public_key()),
        Signature=sign_update(deployment.owner, manifest, head),
    )
    return program.call(services.SET_MANIFEST, request.SerializeToString())


def test_kills_at_random_points_of_set_manifest_and_peer_recovery_lose_nothing(
    replica_set: _ReplicaSet, deployment: Deployment
) -> None:
    """KILL_ROUNDS rounds: an update through a random replica while a random one is killed
    (SIGKILL) at a random moment, then restarted and, every other round, killed again during its
    peer recovery.
    The survivors keep issuing, the restarted one rejoins, and all three end on one history that
    extends the previous round's (an update answered OK is in it; an interrupted one may be)."""
    with replica_set.explained():
        seed = random.randrange(2**32)
        rng = random.Random(seed)
        programs = replica_set.start_all_with_manifest()
        before = history(programs[0])
        for round_number in range(KILL_ROUNDS):
            where = f"round {round_number} (seed {seed})"
            victim, target = rng.randrange(REPLICAS), rng.randrange(REPLICAS)
            names = SETS[round_number % 2]
            answer: list[grpc.StatusCode] = []
            head = before.LatestTransition.TransitionHash
            setter = threading.Thread(
                target=lambda p, h, n, out: out.append(update(p, deployment, h, n)),
                args=(programs[target], head, names, answer),
            )
            setter.start()
            time.sleep(rng.uniform(0, 0.2))
            programs[victim].process.kill()
            programs[victim].process.wait()
            setter.join()
            for index, program in enumerate(programs):
                if index != victim:
                    assert mesh_ca(program, deployment), where  # the survivors keep issuing
            programs[victim] = replica_set.start(victim)
            if round_number % 2:  # killed again somewhere in its peer recovery
                time.sleep(rng.uniform(0, 0.3))
                programs[victim].process.kill()
                programs[victim].process.wait()
                programs[victim] = replica_set.start(victim)
            wait_ready(programs[victim])
            views = [history(program) for program in programs]
            after = views[0]
            assert all(view == after for view in views), where  # one history, one mesh CA
            assert list(after.Manifests[: len(before.Manifests)]) == list(before.Manifests), where
            assert len(after.Manifests) - len(before.Manifests) in (0, 1), where
            if answer == [grpc.StatusCode.OK]:
                assert after.Manifests[-1] == deployment.manifest(names), where
            assert {mesh_ca(program, deployment) for program in programs} == {after.MeshCA}, where
            before = after


def race(programs: list[CoordinatorProcess], requests: list[bytes]) -> dict[int, grpc.StatusCode]:
    """Each program gets its SetManifest request at the same moment; the codes they answered."""
    barrier = threading.Barrier(len(programs))
    codes: dict[int, grpc.StatusCode] = {}

    def attempt(index: int, program: CoordinatorProcess, payload: bytes) -> None:
        barrier.wait()
        codes[index] = program.call(services.SET_MANIFEST, payload)

    threads = [
        threading.Thread(target=attempt, args=(index, program, payload))
        for index, (program, payload) in enumerate(zip(programs, requests, strict=True))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


# Rounds of the two-replica race; each round is two SetManifest calls on the real API.
RACE_ROUNDS = int(os.environ.get("CONTRAST_RACE_ROUNDS", "20"))


def test_two_replica_processes_racing_on_set_manifest_leave_one_winner_and_one_chain(
    replica_set: _ReplicaSet, deployment: Deployment
) -> None:
    """Two replicas get an update of their own after the same head at the same moment: one
    answers OK, the other ABORTED (the ConfigMap's compare-and-swap on resourceVersion lost), and
    every replica then shows the one chain of the winners."""
    with replica_set.explained():
        programs = replica_set.start_all_with_manifest()
        contenders = (
            (programs[0], ("coordinator", "web", "client")),
            (programs[1], ("coordinator",)),
        )
        winners: list[bytes] = []
        for round_number in range(RACE_ROUNDS):
            head = history(programs[2]).LatestTransition.TransitionHash
            requests = []
            for _, names in contenders:
                manifest = deployment.manifest(names)
                requests.append(
                    userapi_pb2.SetManifestRequest(
                        Manifest=manifest,
                        Policies=deployment.documents(names),
                        PreviousTransitionHash=head,
                        WorkloadOwnerPublicKey=public_key_der(deployment.owner.public_key()),
                        Signature=sign_update(deployment.owner, manifest, head),
                    ).SerializeToString()
                )
            codes = race([program for program, _ in contenders], requests)
            where = f"round {round_number}: {codes}"
            assert sorted(codes.values(), key=str) == sorted(
                [grpc.StatusCode.OK, grpc.StatusCode.ABORTED], key=str
            ), where
            (winner,) = [i for i, code in codes.items() if code == grpc.StatusCode.OK]
            winners.append(deployment.manifest(contenders[winner][1]))
            views = [history(program) for program in programs]
            assert all(view == views[0] for view in views), where
            assert list(views[0].Manifests) == [deployment.manifest(), *winners], where
