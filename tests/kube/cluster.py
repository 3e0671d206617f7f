"""The real one-node Kubernetes cluster the Kubernetes-facing tests run on.

`scripts/cluster.sh up DIR` builds (or reuses) Kubernetes, etcd and CoreDNS from the modules
pinned in tools/kubernetes/go.mod and starts them in a network namespace of their own; this module
is the tests' side of it. `kube_cluster` is session-wide: it reuses a running cluster when
CONTRAST_TEST_CLUSTER=DIR names one (start it once with `bash scripts/cluster.sh up DIR` while
developing), else starts one in a temporary folder and takes it down at the end of the session.
A cluster that cannot start fails the tests that need it, with the failing component's log.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "cluster.sh"
# A cold `up` builds every binary first: about 25 minutes on CI's two cores.
UP_TIMEOUT = 3600
KUBECTL_TIMEOUT = 120
INSTALL_TIMEOUT = 300


class KubectlFailed(subprocess.CalledProcessError):
    """kubectl exited non-zero; unlike its base class, the message carries kubectl's stderr."""

    def __str__(self) -> str:
        stderr = self.stderr.decode(errors="replace").strip() if self.stderr else ""
        return f"{' '.join(map(str, self.cmd))} exited {self.returncode}: {stderr}"


@dataclass(frozen=True)
class Cluster:
    directory: Path
    kubeconfig: Path  # admin kubeconfig
    kubectl_path: Path  # the kubectl built with the cluster

    @classmethod
    def at(cls, directory: Path) -> Cluster:
        """The cluster `scripts/cluster.sh up` started in `directory`."""
        return cls(directory, directory / "kubeconfig", directory / "bin" / "kubectl")

    @property
    def registry(self) -> str:
        """host:port of the cluster's registry (plain HTTP): images pushed there run in pods."""
        return (self.directory / "registry-address").read_text().strip()

    def kubectl(
        self,
        *args: str,
        input: bytes | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Runs kubectl against the cluster, as admin unless `kubeconfig` says otherwise."""
        command = [
            str(self.kubectl_path),
            "--kubeconfig",
            str(kubeconfig or self.kubeconfig),
            *args,
        ]
        result = subprocess.run(
            command, input=input, capture_output=True, timeout=KUBECTL_TIMEOUT, check=False
        )
        if check and result.returncode != 0:
            raise KubectlFailed(result.returncode, command, result.stdout, result.stderr)
        return result

    def namespace(self, prefix: str) -> str:
        """Creates a namespace of a fresh name starting with `prefix` and returns its name, once its
        default ServiceAccount exists (pods cannot be created in it before)."""
        name = f"{prefix}-{secrets.token_hex(4)}"
        self.kubectl("create", "namespace", name)
        deadline = time.monotonic() + 60
        while self.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode:
            if time.monotonic() > deadline:
                pytest.fail(f"namespace {name}: no default ServiceAccount after 60 s")
            time.sleep(0.2)
        return name


def cluster_script(action: str, directory: Path) -> subprocess.CompletedProcess[bytes]:
    """Runs `scripts/cluster.sh ACTION DIRECTORY`, its output captured (it names what failed)."""
    return subprocess.run(
        ["bash", str(SCRIPT), action, str(directory)],
        capture_output=True,
        timeout=UP_TIMEOUT,
        check=False,
    )


def start_cluster(directory: Path) -> Cluster:
    """Brings a cluster up in `directory`; on failure takes down what started and fails the test
    with the script's message and the tail of the failing component's log."""
    result = cluster_script("up", directory)
    if result.returncode != 0:
        cluster_script("down", directory)
        output = result.stderr.decode(errors="replace").strip()
        pytest.fail(f"the test cluster did not start (scripts/cluster.sh up):\n{output[-6000:]}")
    return Cluster.at(directory)


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[Cluster]:
    reuse = os.environ.get("CONTRAST_TEST_CLUSTER")
    if reuse:
        cluster = Cluster.at(Path(reuse).resolve())
        if not cluster.kubeconfig.is_file():
            pytest.fail(f"CONTRAST_TEST_CLUSTER={reuse}: no kubeconfig there (is it up?)")
        yield cluster
        return
    # Short and under /tmp: containerd's socket path must stay within the 108 bytes of sun_path.
    directory = Path(tempfile.mkdtemp(prefix="contrast-kc-", dir="/tmp"))
    try:
        yield start_cluster(directory)
    finally:
        cluster_script("down", directory)
        shutil.rmtree(directory, ignore_errors=True)


def install_emulated_runtime(cluster: Cluster, platform: str) -> str:
    """`cluster.sh install-runtime DIR PLATFORM` with this interpreter (the repo's .venv, which
    has Contrast) as the launcher's Python; returns the RuntimeClass's handler. A second call
    changes nothing (and does not restart containerd); a failure fails the test with its log."""
    result = subprocess.run(
        ["bash", str(SCRIPT), "install-runtime", str(cluster.directory), platform, sys.executable],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"cluster.sh install-runtime failed:\n{result.stderr[-4000:]}")
    applied = (cluster.directory / f"runtimeclass-{platform}.yaml").read_text()
    handler = re.search(r"^handler: (\S+)$", applied, re.MULTILINE)
    assert handler is not None, applied
    return handler.group(1)


@pytest.fixture(scope="session")
def release_layout(request: pytest.FixtureRequest) -> Path:
    """This checkout's release images as an OCI layout: the session's `built_images` (built once,
    about three minutes with the wheel cache of tests/imagebuild). CONTRAST_TEST_IMAGES=DIR names
    a layout already built from this checkout by `contrast-build-images --output DIR` (while
    developing)."""
    reuse = os.environ.get("CONTRAST_TEST_IMAGES")
    if reuse:
        return Path(reuse).resolve()
    built = request.getfixturevalue("built_images")
    return Path(built.layout)
