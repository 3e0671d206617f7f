"""The history backends every shared test runs on: files, and ConfigMaps on the real API server.

The ConfigMap backend runs on the test cluster (`tests/kube/cluster.py`), each test in a fresh
namespace of its own, every replica with its own API client, authenticated as the Coordinator's
ServiceAccount with exactly the Role `contrast coordinator-resources` emits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contrast.history.configmaps import ConfigMapStore, core_api
from contrast.history.store import FileSystemStore, Store
from tests.kube.cluster import Cluster

BACKENDS = ["files", "configmaps"]
StoreFactory = Callable[[], Store]


@pytest.fixture(params=BACKENDS)
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Makes a store per replica: each its own file handle or API client on one shared state."""
    if request.param == "files":
        yield lambda: FileSystemStore(tmp_path / "state")
        return
    cluster: Cluster = request.getfixturevalue("kube_cluster")
    namespace = cluster.namespace("history")
    yield lambda: ConfigMapStore(core_api(kubeconfig=cluster.kubeconfig), namespace)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
