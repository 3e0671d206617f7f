"""`contrast coordinator --history configmaps`: the program keeps its history in ConfigMaps.

The program runs as a process against the fake API server through a kubeconfig (as it would
outside a cluster); without a namespace outside a cluster it stops with one readable line.
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
from tests.kube.fakeapi import running, write_kubeconfig


def test_the_program_keeps_its_history_in_configmaps(
    deployment: Deployment, tmp_path: Path, tee_dir: Path
) -> None:
    with running() as server:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.host)
        flags = ["--history", "configmaps", "--kubeconfig", str(kubeconfig), "--namespace", "ns"]
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
        kinds = {
            obj["metadata"]["labels"][KIND_LABEL]
            for (namespace, _), obj in server.objects.items()
            if namespace == "ns"
        }
        assert {"manifests", "policies", "transitions"} <= kinds
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
