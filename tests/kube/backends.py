"""The history backends every shared test runs on: files, and ConfigMaps on the fake API server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contrast.history.configmaps import ConfigMapStore, core_api
from contrast.history.store import FileSystemStore, Store
from tests.kube.fakeapi import running

BACKENDS = ["files", "configmaps"]
StoreFactory = Callable[[], Store]


@pytest.fixture(params=BACKENDS)
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Makes a store per replica: each its own file handle or API client on one shared state."""
    if request.param == "files":
        yield lambda: FileSystemStore(tmp_path / "state")
        return
    with running() as server:
        yield lambda: ConfigMapStore(core_api(host=server.host), "contrast")
