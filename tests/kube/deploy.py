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
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from contrast.policy import initdata
from tests.kube.cluster import Cluster

RELEASE_PREFIX = "ghcr.io/contrast-python/"
FORWARDER_NAME = "port-forwarder-coordinator"
USER_API_PORT = 1313
# The release images' interpreter (Debian bookworm's; the images have no python3 link).
IMAGE_PYTHON = "/usr/bin/python3.11"

# The user's port-forwarder pod (the original's, with a Python relay in place of socat).
FORWARDER_YAML = (
    Path(__file__).resolve().parents[2] / "examples/kubernetes/port-forwarder-coordinator.yml"
)


def push_release(layout: Path, registry: str, directory: Path) -> Path:
    """Copies every release image of `layout` into `registry`, and writes the
    `--image-replacements` file naming each by its pushed digest; returns the file's path."""
    lines = []
    for reference in layout_references(layout):
        name_and_tag = reference.removeprefix(RELEASE_PREFIX)
        digest_file = directory / f"{name_and_tag.replace(':', '_')}.digest"
        subprocess.run(
            [
                "skopeo", "copy", "--quiet", "--dest-tls-verify=false",
                "--digestfile", str(digest_file),
                f"oci:{layout}:{reference}", f"docker://{registry}/{name_and_tag}",
            ],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        digest = digest_file.read_text().strip()
        repository = name_and_tag.rpartition(":")[0]
        lines.append(f"{reference}={registry}/{repository}@{digest}")
    replacements = directory / "image-replacements.txt"
    replacements.write_text("\n".join(lines) + "\n")
    return replacements


def layout_references(layout: Path) -> list[str]:
    """The release references an OCI layout names (`org.opencontainers.image.ref.name`)."""
    index = json.loads((layout / "index.json").read_text())
    names = [
        m.get("annotations", {}).get("org.opencontainers.image.ref.name", "")
        for m in index["manifests"]
    ]
    return sorted(name for name in names if name.startswith(RELEASE_PREFIX))


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
    """`kubectl port-forward TARGET :PORT` for the duration; yields the local port."""
    process = subprocess.Popen(
        [
            str(cluster.kubectl_path), "--kubeconfig", str(cluster.kubeconfig),
            "-n", namespace, "port-forward", "--address", "127.0.0.1", target, f":{port}",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        match = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) ->", line)
        if not match:
            process.kill()
            _, stderr = process.communicate(timeout=10)
            pytest.fail(f"kubectl port-forward {target}: {line}{stderr.decode(errors='replace')}")
        yield int(match.group(1))
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        if process.poll() is None:
            process.kill()
            process.wait()
