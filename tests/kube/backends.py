"""The history backends every shared test runs on: files, and ConfigMaps on the fake API server."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contrast.history.configmaps import ConfigMapStore, core_api
from contrast.history.store import FileSystemStore, Store
from tests.kube.fakeapi import running

BACKENDS = ["files", "configmaps"]
StoreFactory = Callable[[], Store]
# A file to which each ConfigMap store appends the API verbs the fake server saw it call.
VERBS_RECORD = "CONTRAST_TEST_VERBS_RECORD"


@pytest.fixture(params=BACKENDS)
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Makes a store per replica: each its own file handle or API client on one shared state."""
    if request.param == "files":
        yield lambda: FileSystemStore(tmp_path / "state")
        return
    with running() as server:
        yield lambda: ConfigMapStore(core_api(host=server.host), "contrast")
    record = os.environ.get(VERBS_RECORD)
    if record:  # tests/release/test_coordinator_rbac.py: which verbs the suite needed
        with open(record, "a") as output:
            output.writelines(f"{verb}\n" for verb in sorted(server.verbs))
