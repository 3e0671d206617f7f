"""The Coordinator's Role, for real: its ServiceAccount's token on the test cluster's API server.

The ServiceAccount, Role and RoleBinding are applied exactly as `contrast coordinator-resources`
emits them, and the Coordinator program runs with a token of that ServiceAccount (what its Pod
mounts), not with admin credentials. With the Role as emitted, a deployment's life works: start,
the first manifest, an update, the history read back, a restart that finds the history. With any
one verb taken out of the Role, that life fails with a clear error naming the refusal. And
`kubectl auth can-i --list` as the ServiceAccount shows nothing beyond the Role's configmaps verbs
and what every authenticated account may do anyway.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from contrast.api import services, userapi_pb2
from contrast.atls.reportdata import public_key_der
from contrast.manifest.ownership import sign_update
from tests.conftest import REPO
from tests.coordinator.conftest import (
    Deployment,
    deployment,
    emulated_tee,
    policy_hash,
    seedshare_key,
    tee_dir,
)
from tests.coordinator.program import CoordinatorProcess, command
from tests.kube.cluster import Cluster
from tests.kube.serviceaccount import grant, role_verbs, service_account_user

__all__ = ["deployment", "emulated_tee", "seedshare_key", "tee_dir"]
# The verbs of the Role as the CLI emits it: each is taken out once below.
VERBS = role_verbs()


@dataclass(frozen=True)
class Outcome:
    """How far a deployment's life got, and the first failure on the way (its step and words)."""

    completed: tuple[str, ...]
    failed_step: str | None = None
    failure: str = ""


@pytest.fixture
def namespace(kube_cluster: Cluster) -> Iterator[str]:
    name = kube_cluster.namespace("rbac")
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false")


def set_request(deployment: Deployment, names: tuple[str, ...], head: bytes | None) -> bytes:
    manifest = deployment.manifest(names)
    if head is None:
        request = userapi_pb2.SetManifestRequest(
            Manifest=manifest, Policies=deployment.documents(names)
        )
    else:
        request = userapi_pb2.SetManifestRequest(
            Manifest=manifest,
            Policies=deployment.documents(names),
            PreviousTransitionHash=head,
            WorkloadOwnerPublicKey=public_key_der(deployment.owner.public_key()),
            Signature=sign_update(deployment.owner, manifest, head),
        )
    serialized: bytes = request.SerializeToString()
    return serialized


def rpc(
    program: CoordinatorProcess, method: services.Method[Any, Any], payload: bytes
) -> tuple[grpc.StatusCode, str, bytes]:
    """The status code, the error's details (empty on OK) and the response bytes of one call."""
    try:
        response: bytes = program.channel(method.service).unary_unary(method.path)(
            payload, timeout=30
        )
    except grpc.RpcError as error:
        return error.code(), str(error.details()), b""
    return grpc.StatusCode.OK, "", response


@dataclass(frozen=True)
class Life:
    """A deployment's life on one namespace of the cluster, with a kubeconfig to run it as."""

    cluster: Cluster
    namespace: str
    deployment: Deployment
    tmp_path: Path
    tee_dir: Path

    def start(self, kubeconfig: Path) -> CoordinatorProcess | str:
        """The Coordinator program on the ConfigMap history with `kubeconfig`; or, if it stopped
        at start, the message of its one error line."""
        flags = ["--history", "configmaps", "--kubeconfig", str(kubeconfig),
                 "--namespace", self.namespace]  # fmt: skip
        hashed = policy_hash(self.deployment.policies["coordinator"])
        state = self.tmp_path / "unused"
        try:
            return CoordinatorProcess.start(state, self.tee_dir, hashed, flags)
        except AssertionError:  # it did not start: run it once more for its whole error output
            pass
        argv = command(state, self.tee_dir, hashed, flags)
        result = subprocess.run(argv, cwd=REPO, capture_output=True, timeout=60, check=False)
        lines = result.stderr.decode().splitlines()
        assert result.returncode == 1, lines
        (line,) = lines
        return str(json.loads(line)["message"])

    def run(self, kubeconfig: Path) -> Outcome:
        """Start, set the first manifest, read the history, update it, read it again, restart and
        find it: every ConfigMap operation the Coordinator makes, as its users cause them."""
        deployment = self.deployment
        done: list[str] = []
        program = self.start(kubeconfig)
        if isinstance(program, str):
            return Outcome(tuple(done), "start", program)
        done.append("start")
        heads: list[bytes] = []
        steps = [
            ("first manifest", services.SET_MANIFEST,
             lambda: set_request(deployment, ("coordinator", "web"), None)),
            ("history read", services.GET_MANIFESTS, lambda: b""),
            ("update", services.SET_MANIFEST,
             lambda: set_request(deployment, ("coordinator",), heads[-1])),
            ("history read after the update", services.GET_MANIFESTS, lambda: b""),
        ]  # fmt: skip
        try:
            for step, method, payload in steps:
                code, details, response = rpc(program, method, payload())
                if code != grpc.StatusCode.OK:
                    return Outcome(tuple(done), step, f"{code.name}: {details}")
                if method is services.GET_MANIFESTS:
                    answer = userapi_pb2.GetManifestsResponse.FromString(response)
                    heads.append(answer.LatestTransition.TransitionHash)
                done.append(step)
        finally:
            program.stop()
        assert len(set(heads)) == 2, heads
        restarted = self.start(kubeconfig)
        if isinstance(restarted, str):
            return Outcome(tuple(done), "restart", restarted)
        lines = restarted.stop()
        if not any(b"Coordinator started in mode 'recovery'" in line for line in lines):
            return Outcome(tuple(done), "restart", lines[0].decode())
        done.append("restart")
        return Outcome(tuple(done))


@pytest.fixture
def life(
    kube_cluster: Cluster, namespace: str, deployment: Deployment, tmp_path: Path, tee_dir: Path
) -> Life:
    return Life(kube_cluster, namespace, deployment, tmp_path, tee_dir)


def test_the_coordinator_works_with_its_service_account_token(life: Life) -> None:
    kubeconfig = grant(life.cluster, life.namespace)
    assert b"client-certificate" not in kubeconfig.read_bytes()  # only the token
    outcome = life.run(kubeconfig)
    assert outcome.failed_step is None, outcome
    listing = json.loads(
        life.cluster.kubectl("get", "configmaps", "-n", life.namespace, "-o", "json").stdout
    )
    written = {item["metadata"]["name"] for item in listing["items"]}
    assert "contrast-store-transitions-latest" in written
    assert sum(name.startswith("contrast-store-manifests-") for name in written) == 2


@pytest.mark.parametrize("verb", VERBS)
def test_without_any_one_verb_the_coordinator_fails_clearly(verb: str, life: Life) -> None:
    outcome = life.run(grant(life.cluster, life.namespace, without=verb))
    print(f"without {verb}: {outcome.failed_step} fails: {outcome.failure}")  # -rP shows them
    assert outcome.failed_step is not None, f"the Coordinator needs no {verb!r}: {outcome}"
    assert "refused access" in outcome.failure, outcome
    assert "403 Forbidden" in outcome.failure, outcome
    # The server's own words name the account and the verb it lacks.
    assert f'"{service_account_user(life.namespace)}" cannot {verb} resource "configmaps"' in (
        outcome.failure
    ), outcome


Row = tuple[tuple[str, ...], frozenset[str]]


def can_i_list(cluster: Cluster, namespace: str, user: str) -> set[Row]:
    """The rows of `kubectl auth can-i --list` as `user` in `namespace`: each row's words before
    its verbs, and its verbs (the last column, `[get list]`)."""
    output = cluster.kubectl(
        "auth", "can-i", "--list", "-n", namespace, f"--as={user}"
    ).stdout.decode()
    header, *lines = output.splitlines()
    assert header.split()[0] == "Resources", header
    rows = set()
    for line in lines:
        words = line.split()
        if not words:
            continue
        start = max(i for i, word in enumerate(words) if word.startswith("["))
        verbs = " ".join(words[start:]).strip("[]").split()
        rows.add((tuple(words[:start]), frozenset(verbs)))
    return rows


def test_can_i_list_shows_nothing_beyond_the_configmaps_verbs(
    kube_cluster: Cluster, namespace: str
) -> None:
    grant(kube_cluster, namespace)
    granted = can_i_list(kube_cluster, namespace, service_account_user(namespace))
    # A ServiceAccount of the same namespace that no Role names: what any account may do.
    kube_cluster.kubectl("create", "serviceaccount", "bystander", "-n", namespace)
    baseline = can_i_list(kube_cluster, namespace, service_account_user(namespace, "bystander"))
    assert granted - baseline == {(("configmaps", "[]", "[]"), frozenset(VERBS))}
    assert baseline <= granted
