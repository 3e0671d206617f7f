"""The user's side of examples/mesh-app on the test cluster, for the end-to-end tests.

The pieces are those `contrast demo --kubernetes` uses (contrast.local.kubedemo, kubecluster,
meshprobe), so the test and the demo run the same steps: the example's image built as
`examples/mesh-app/build_image.py` does and pushed by digest, the node's public roots for
`generate --emulated-tee`, the cluster through its kubectl (port-forwards, a pod's `/contrast` as
the node reads it) and the TLS clients of the mesh.
"""

from __future__ import annotations

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
