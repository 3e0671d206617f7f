"""`contrast coordinator --history configmaps`: the program keeps its history in ConfigMaps.

The program runs as a process against the test cluster's API server through a kubeconfig (as it
would outside a cluster), as the Coordinator's ServiceAccount; without a namespace outside a
cluster, or when the API server fails (an injected fault), it stops with one readable line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import grpc

from contrast.api import services, userapi_pb2
from contrast.history.configmaps import KIND_LABEL
from tests.conftest import REPO
from tests.coordinator.conftest import Deployment, policy_hash
from tests.coordinator.program import CoordinatorProcess, command
from tests.kube.cluster import Cluster
from tests.kube.fakeapi import failing, write_kubeconfig
from tests.kube.serviceaccount import grant


def test_the_program_keeps_its_history_in_configmaps(
    deployment: Deployment, tmp_path: Path, tee_dir: Path, kube_cluster: Cluster
) -> None:
    namespace = kube_cluster.namespace("flags")
    kubeconfig = grant(kube_cluster, namespace)
    flags = ["--history", "configmaps", "--kubeconfig", str(kubeconfig), "--namespace", namespace]
    program = CoordinatorProcess.start(
        tmp_path / "unused", tee_dir, policy_hash(deployment.policies["coordinator"]), flags
    )
    try:
        request = userapi_pb2.SetManifestRequest(
            Manifest=deployment.manifest(), Policies=deployment.documents()
        )
        code = program.call(services.SET_MANIFEST, request.SerializeToString())
        assert code == grpc.StatusCode.OK
    finally:
        program.stop()
    listing = json.loads(
        kube_cluster.kubectl(
            "get", "configmaps", "-n", namespace, "-l", KIND_LABEL, "-o", "json"
        ).stdout
    )
    kinds = {item["metadata"]["labels"][KIND_LABEL] for item in listing["items"]}
    assert {"manifests", "packs", "policyindexes", "policysets", "transitions"} <= kinds
    assert not (tmp_path / "unused").exists()


def test_configmaps_outside_a_cluster_without_a_namespace_is_one_line(
    deployment: Deployment, tmp_path: Path, tee_dir: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    argv = command(
        tmp_path / "state",
        tee_dir,
        policy_hash(deployment.policies["coordinator"]),
        ["--history", "configmaps", "--kubeconfig", str(kubeconfig)],
    )
    result = subprocess.run(argv, cwd=REPO, capture_output=True, timeout=60, check=False)
    assert result.returncode == 1
    (line,) = result.stderr.decode().splitlines()
    assert "no namespace for the ConfigMap history" in json.loads(line)["message"]


def test_the_coordinator_stops_at_start_with_one_line_on_a_server_error(
    deployment: Deployment, tmp_path: Path, tee_dir: Path
) -> None:
    with failing(500) as server:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.host)
        argv = command(
            tmp_path / "unused",
            tee_dir,
            policy_hash(deployment.policies["coordinator"]),
            ["--history", "configmaps", "--kubeconfig", str(kubeconfig), "--namespace", "ns"],
        )
        result = subprocess.run(argv, cwd=REPO, capture_output=True, timeout=60, check=False)
    assert result.returncode == 1
    (line,) = result.stderr.decode().splitlines()
    message = json.loads(line)["message"]
    assert message.startswith("the Coordinator cannot start:"), message
    assert "failed on transitions/latest (500 Internal Server Error: injected fault" in message
