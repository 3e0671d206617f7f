"""The user's side of examples/mesh-app on the test cluster, for its end-to-end test.

`push_app_image` builds the example's image as `examples/mesh-app/build_image.py` does (the
release base layer plus the app's layer) and pushes it by digest, as the release images are;
`node_public_roots` is the node's emulated roots' public part, which a user passes to
`generate --emulated-tee` as they would pass AMD's or Intel's roots. The cluster's kubectl,
port-forwards and a pod's `/contrast` as the node sees it come from `contrast.local.kubecluster`,
and the TLS clients of the mesh from `contrast.local.meshprobe`, which `contrast demo
--kubernetes` uses too.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from contrast.local.kubecluster import KubeCluster, push_image
from tests.kube.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mesh-app"
APP_FILES = ("web.yml", "api.yml", "db.yml")


def kube(cluster: Cluster) -> KubeCluster:
    """The same cluster as the demo drives it."""
    return KubeCluster(cluster.directory)


def build_image_module() -> ModuleType:
    """examples/mesh-app/build_image.py, a script of the example (its folder is no package)."""
    spec = importlib.util.spec_from_file_location(
        "mesh_app_build_image", EXAMPLE / "build_image.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def push_app_image(release_layout: Path, registry: str, directory: Path) -> tuple[str, str]:
    """Builds the app's image into `directory` and copies it into `registry` by digest;
    returns (the example's reference, the pushed digest reference)."""
    builder = build_image_module()
    layout = directory / "mesh-app-layout"
    builder.build(release_layout, layout)
    reference: str = builder.REFERENCE
    return reference, push_image(layout, reference, f"{registry}/mesh-app:1.0", directory)


def node_public_roots(directory: Path) -> Path:
    """The node's emulated roots of trust, public part only (`contrast-emulated-runtime setup
    --public`), as `cluster.sh install-runtime` created them on this machine's one node."""
    subprocess.run(
        [sys.executable, "-m", "contrast.emulatedruntime", "setup", "--public", str(directory)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return directory
