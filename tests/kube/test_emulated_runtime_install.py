"""The emulated confidential runtime, installed into the test cluster by the node installer.

`scripts/cluster.sh install-runtime DIR emulated-snp PYTHON` runs `contrast node-installer` from
the host against the cluster's containerd config (the DaemonSet cannot: it writes the host's
/etc/containerd and restarts containerd through systemd, while the cluster's containerd is a
process of cluster.sh), with this interpreter (the repo's .venv, which has Contrast) as the
launcher's Python, restarts that containerd and applies the RuntimeClass of `contrast runtime`.
What is proven here: the handler of that RuntimeClass is a runtime of the cluster's containerd
whose runc is the installed launcher, so a pod of the RuntimeClass is created by the emulated
runtime (which judges it against its policy) and not by plain runc; a second install changes
nothing and leaves containerd running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.kube.cluster import SCRIPT, Cluster

PLATFORM = "emulated-snp"
INSTALL_TIMEOUT = 300


def install_runtime(cluster: Cluster) -> subprocess.CompletedProcess[str]:
    """`cluster.sh install-runtime` with this test's Python; fails the test with its message."""
    result = subprocess.run(
        ["bash", str(SCRIPT), "install-runtime", str(cluster.directory), PLATFORM, sys.executable],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"cluster.sh install-runtime failed:\n{result.stderr[-4000:]}")
    return result


def runtime_class(cluster: Cluster) -> dict[str, Any]:
    classes = json.loads(cluster.kubectl("get", "runtimeclass", "-o", "json").stdout)["items"]
    ours = [c for c in classes if c["metadata"]["name"].startswith(f"contrast-cc-{PLATFORM}-")]
    assert len(ours) >= 1, f"no RuntimeClass contrast-cc-{PLATFORM}-*: {classes}"
    applied = (cluster.directory / f"runtimeclass-{PLATFORM}.yaml").read_text()
    (chosen,) = [c for c in ours if f"name: {c['metadata']['name']}\n" in applied]
    assert isinstance(chosen, dict)
    return chosen


def containerd_pid(cluster: Cluster) -> int:
    return int((cluster.directory / "containerd.pid").read_text())


def test_install_runtime_gives_the_cluster_the_emulated_runtime(kube_cluster: Cluster) -> None:
    install_runtime(kube_cluster)
    handler = str(runtime_class(kube_cluster)["handler"])
    config = tomllib.loads((kube_cluster.directory / "containerd/config.toml").read_text())
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    table = cri["containerd"]["runtimes"][handler]
    assert table["runtime_type"] == "io.containerd.runc.v2"
    assert table["pod_annotations"] == ["io.katacontainers.*"]
    launcher = Path(table["options"]["BinaryName"])
    assert launcher == Path(f"/opt/edgeless/{handler}/bin/contrast-emulated-runc")
    assert os.access(launcher, os.X_OK)
    assert f"exec {sys.executable} -m contrast.emulatedruntime runc" in launcher.read_text()
    # Pods' network namespaces where a node's containerd keeps them, as every policy expects.
    assert cri["netns_mounts_under_state_dir"] is False
    kube_cluster.kubectl("wait", "--for=condition=Ready", "--timeout=60s", "node/contrast-node")

    # Again: nothing to change, so containerd is not restarted.
    before = containerd_pid(kube_cluster)
    install_runtime(kube_cluster)
    assert containerd_pid(kube_cluster) == before
    log = (kube_cluster.directory / f"logs/node-installer-{PLATFORM}.log").read_text()
    assert "runtime added" not in log
    assert ": unchanged" in log


def test_a_pod_of_the_runtime_class_is_created_by_the_emulated_runtime(
    kube_cluster: Cluster,
) -> None:
    """A pod without initdata under the RuntimeClass: the emulated runtime, not runc, creates its
    sandbox, and refuses it (there is no policy to judge it by); the kubelet's event gives the
    runtime's own reason, which plain runc would never have (it would have started the pod)."""
    install_runtime(kube_cluster)
    handler = str(runtime_class(kube_cluster)["handler"])
    namespace = kube_cluster.namespace("emulated")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "no-initdata", "namespace": namespace},
        "spec": {
            "runtimeClassName": handler,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": "contrast.local/pause:3.10"}],
        },
    }
    kube_cluster.kubectl("apply", "-f", "-", input=json.dumps(pod).encode())
    reason = "OCI runtime create failed: pod sandbox "
    missing = "has no io.katacontainers.config.hypervisor.cc_init_data annotation"
    deadline = time.monotonic() + 90
    messages: list[str] = []
    while time.monotonic() < deadline:
        listed = kube_cluster.kubectl("-n", namespace, "get", "events", "-o", "json").stdout
        events = json.loads(listed)["items"]
        messages = [e["message"] for e in events if e["reason"] == "FailedCreatePodSandBox"]
        if any(reason in m and missing in m for m in messages):
            break
        time.sleep(1)
    else:
        pytest.fail(f"no FailedCreatePodSandBox with the runtime's reason in 90 s: {messages}")
    print(next(m for m in messages if missing in m))
    phase = kube_cluster.kubectl(
        "-n", namespace, "get", "pod", "no-initdata", "-o", "jsonpath={.status.phase}"
    ).stdout.decode()
    assert phase == "Pending"
    kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
