"""Contrast deployed on the test cluster the way a user deploys it, for the end-to-end tests.

The release images go into the cluster's registry by digest (`push_release`, skopeo from the OCI
layout `contrast-build-images` writes), the resources are what `contrast coordinator-resources` and
`contrast generate` print, applied with kubectl, and the user reaches the Coordinator the way the
original's docs say: through the `port-forwarder-coordinator` pod of
examples/kubernetes/port-forwarder-coordinator.yml and `kubectl port-forward` (`port_forward`),
since Kata pods do not support `kubectl port-forward` themselves.

The pods run under the emulated confidential runtime the project's node installer puts into the
cluster's containerd (`cluster.sh install-runtime`, `tests/kube/cluster.py`): each container is
checked against its pod's policy, and the TEE a pod attests with is the runtime's.
"""

from __future__ import annotations

import contextlib
import copy
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from contrast.local import kubecluster
from contrast.local.kubecluster import RELEASE_PREFIX, KubeCluster
from contrast.policy import initdata
from tests.kube.cluster import Cluster

FORWARDER_NAME = "port-forwarder-coordinator"
USER_API_PORT = 1313
# The release images' interpreter (Debian bookworm's; the images have no python3 link).
IMAGE_PYTHON = "/usr/bin/python3.11"

# The user's port-forwarder pod (the original's, with a Python relay in place of socat).
FORWARDER_YAML = (
    Path(__file__).resolve().parents[2] / "examples/kubernetes/port-forwarder-coordinator.yml"
)


def push_release(layout: Path, registry: str, directory: Path) -> Path:
    """Copies every release image of `layout` into `registry` (as the Kubernetes demo does,
    contrast.local.kubecluster.push_release), and writes the `--image-replacements` file naming
    each by its pushed digest; returns the file's path."""
    pushed = kubecluster.push_release(layout, registry, directory)
    replacements = directory / "image-replacements.txt"
    replacements.write_text("".join(f"{ref}={image}\n" for ref, image in pushed.items()))
    return replacements


def documents_of(text: str) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe").load_all(text) if d]


def dump(documents: list[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    YAML(typ="safe").dump_all(documents, out)
    return out.getvalue().encode()


def pod_initdata(workload: dict[str, Any]) -> bytes:
    """The initdata TOML `generate` put into a workload's pod template."""
    annotations = workload["spec"]["template"]["metadata"]["annotations"]
    return initdata.decode_annotation(annotations[initdata.ANNOTATION])


def renamed(workload: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy of a Deployment under another name and pod label (its pods its own)."""
    changed = copy.deepcopy(workload)
    changed["metadata"]["name"] = name
    label = {"app.kubernetes.io/name": name}
    changed["spec"]["selector"]["matchLabels"] = label
    changed["spec"]["template"]["metadata"]["labels"] = dict(label)
    return changed


def wait_ready(cluster: Cluster, namespace: str, selector: str, count: int, timeout: float) -> None:
    """Waits until `count` pods of `selector` are Ready; fails with their state and logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = cluster.kubectl(
            "-n", namespace, "get", "pods", "-l", selector, "-o",
            "jsonpath={range .items[*]}{.metadata.name}"
            " {.status.conditions[?(@.type=='Ready')].status}{'\\n'}{end}",
        )  # fmt: skip
        lines = result.stdout.decode().split("\n")
        if sum(line.endswith(" True") for line in lines) >= count:
            return
        time.sleep(1)
    pytest.fail(
        f"{selector} in {namespace}: not {count} Ready after {timeout:.0f} s\n"
        + describe(cluster, namespace)
    )


def wait_started(
    cluster: Cluster, namespace: str, selector: str, count: int, timeout: float
) -> None:
    """Waits until `count` pods of `selector` have every container started (startup probe
    passed); fails with their state and logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = cluster.kubectl(
            "-n", namespace, "get", "pods", "-l", selector, "-o",
            "jsonpath={range .items[*]}{.metadata.name}"
            " {.status.containerStatuses[*].started}{'\\n'}{end}",
        )  # fmt: skip
        lines = [line.split() for line in result.stdout.decode().splitlines()]
        if sum(len(f) > 1 and all(s == "true" for s in f[1:]) for f in lines) >= count:
            return
        time.sleep(1)
    pytest.fail(
        f"{selector} in {namespace}: not {count} started after {timeout:.0f} s\n"
        + describe(cluster, namespace)
    )


def describe(cluster: Cluster, namespace: str) -> str:
    """What a failure message needs: the pods, the events, the last log lines of each pod."""
    parts = [
        cluster.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False).stdout.decode(),
        cluster.kubectl(
            "-n", namespace, "get", "events", "--sort-by=.lastTimestamp", check=False
        ).stdout.decode()[-4000:],
    ]
    names = cluster.kubectl(
        "-n", namespace, "get", "pods", "-o", "name", check=False
    ).stdout.decode()
    for name in names.split():
        log = cluster.kubectl(
            "-n", namespace, "logs", "--all-containers", "--tail", "15", name, check=False
        )
        parts.append(f"--- {name}\n{(log.stdout + log.stderr).decode(errors='replace')}")
    return "\n".join(parts)


def forwarder_pod(namespace: str, image: str) -> dict[str, Any]:
    """examples/kubernetes/port-forwarder-coordinator.yml as the user applies it, in `namespace`
    and with the release image replaced by `image` (the pushed digest)."""
    (pod,) = documents_of(FORWARDER_YAML.read_text())
    pod["metadata"]["namespace"] = namespace
    (container,) = pod["spec"]["containers"]
    assert container["image"].startswith(RELEASE_PREFIX + "coordinator:")
    container["image"] = image
    return pod


@contextlib.contextmanager
def port_forward(cluster: Cluster, namespace: str, target: str, port: int) -> Iterator[int]:
    """`kubectl port-forward TARGET :PORT` for the duration (the demo's, KubeCluster's); yields
    the local port."""
    with KubeCluster(cluster.directory).port_forward(namespace, target, (port,)) as ports:
        yield ports[port]
