"""The user's side of examples/mesh-app on the test cluster, for the end-to-end tests.

The pieces are those `contrast demo --kubernetes` uses (contrast.local.kubedemo, kubecluster,
meshprobe), so the test and the demo run the same steps: the example's image built as
`examples/mesh-app/build_image.py` does and pushed by digest, the node's public roots for
`generate --emulated-tee`, the cluster through its kubectl (port-forwards, a pod's `/contrast` as
the node reads it) and the TLS clients of the mesh.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

from contrast.local.kubecluster import KubeCluster
from contrast.local.kubedemo import export_node_roots, load_example_builder, push_app_image
from tests.kube.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mesh-app"
APP_FILES = ("web.yml", "api.yml", "db.yml")

__all__ = [
    "APP_FILES",
    "EXAMPLE",
    "build_image_module",
    "deployment_yaml",
    "export_node_roots",
    "kube",
    "node_public_roots",
    "push_app_image",
]


def kube(cluster: Cluster) -> KubeCluster:
    """The same cluster as the demo drives it."""
    return KubeCluster(cluster.directory)


def build_image_module() -> ModuleType:
    """examples/mesh-app/build_image.py, a script of the example (its folder is no package)."""
    module: ModuleType = load_example_builder()
    return module


def node_public_roots(directory: Path) -> Path:
    """The node's emulated roots' public part, written to `directory` (returned)."""
    export_node_roots(directory)
    return directory


def deployment_yaml(
    name: str,
    namespace: str,
    image: str,
    command: Sequence[str],
    *,
    container: str = "app",
    replicas: int = 1,
    grace_seconds: int | None = 1,
    env: Mapping[str, str] | None = None,
    memory: str | None = None,
) -> str:
    """A user's Deployment of one container under the `contrast-cc` RuntimeClass, as typed before
    `contrast generate` (which puts the platform's handler in its place and injects the rest).

    The cluster tests and bench_pod_certs write their workloads with it, so the three say the same
    thing the same way. Text, not a dumped dict: generate reads it as a user's file and keeps its
    layout. The command and env values are written as JSON strings (valid YAML flow scalars, so any
    text stays a string); `memory` is the container's limit and request; `grace_seconds` None leaves
    Kubernetes' default of 30 s.
    """
    grace = (
        "" if grace_seconds is None else f"      terminationGracePeriodSeconds: {grace_seconds}\n"
    )
    variables = "".join(
        f"            - name: {key}\n              value: {json.dumps(value)}\n"
        for key, value in (env or {}).items()
    )
    resources = "" if memory is None else (
        "          resources:\n"
        f"            limits:\n              memory: {memory}\n"
        f"            requests:\n              memory: {memory}\n"
    )  # fmt: skip
    return (
        "apiVersion: apps/v1\n"
        "kind: Deployment\n"
        "metadata:\n"
        f"  name: {name}\n"
        f"  namespace: {namespace}\n"
        "spec:\n"
        f"  replicas: {replicas}\n"
        "  selector:\n"
        "    matchLabels:\n"
        f"      app.kubernetes.io/name: {name}\n"
        "  template:\n"
        "    metadata:\n"
        "      labels:\n"
        f"        app.kubernetes.io/name: {name}\n"
        "    spec:\n"
        "      runtimeClassName: contrast-cc\n"
        f"{grace}"
        "      containers:\n"
        f"        - name: {container}\n"
        f"          image: {image}\n"
        f"          command: {json.dumps(list(command))}\n"
        + ("          env:\n" + variables if variables else "")
        + resources
    )
