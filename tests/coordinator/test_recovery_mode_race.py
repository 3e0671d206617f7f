"""A replica that left recovery mode stays out of it, whatever a slow look at the history found.

`Coordinator.mode` (the readiness probe's question, asked on the HTTP server's threads) looks
whether another replica started a history while this one has none. That look is a read of the
store, the Kubernetes API's on ConfigMaps, and may take long under load; meanwhile the peer
recovery thread may find the same head and recover. A look that began before the recovery and
ended after it must not put the ready replica back into recovery mode: it did once, and the
replica answered every SetManifest with FAILED_PRECONDITION ("in recovery mode") while its probe
said ready (test_replica_processes' race, rarely, under load).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from contrast.coordinator.core import Coordinator, Mode
from contrast.coordinator.errors import NotReady
from contrast.history.history import LATEST_KEY, History
from contrast.history.store import FileSystemStore
from contrast.manifest.verifier import workload_verifier
from tests.coordinator.conftest import Deployment

PROBE = "readiness-probe"


class HeadReadHeld:
    """The replica's store, in which the probe thread's reads of the head wait for `release`
    after reading (the slow API server answer, arriving late)."""

    def __init__(self, inner: FileSystemStore) -> None:
        self._inner = inner
        self.held = threading.Event()
        self.release = threading.Event()

    def get(self, key: str) -> bytes | None:
        value = self._inner.get(key)
        if key == LATEST_KEY and threading.current_thread().name == PROBE:
            self.held.set()
            assert self.release.wait(30)
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_look_at_the_history_that_ends_after_recovery_leaves_the_replica_ready(
    deployment: Deployment,
) -> None:
    store = HeadReadHeld(FileSystemStore(deployment.state_dir))
    replica = Coordinator(History(store), verifier_for=workload_verifier)  # type: ignore[arg-type]
    assert replica.mode is Mode.NO_MANIFEST
    # The manifest is set through another replica; this one learns of it from the history.
    result = deployment.coordinator().set_manifest(deployment.manifest(), deployment.documents())
    assert result.seed_shares is not None
    seed, salt = result.seed_shares.decrypt(deployment.seedshare), result.seed_shares.salt

    looked: list[Mode] = []
    probe = threading.Thread(target=lambda: looked.append(replica.mode), name=PROBE)
    probe.start()
    assert store.held.wait(30)  # the probe read the head and waits for its answer
    replica.recover(seed, salt)  # peer recovery (here with the seed) ends meanwhile
    store.release.set()
    probe.join(30)

    # Ready, and answering as a ready replica: an update signed by the owner is set.
    manifest = deployment.update(replica, ("coordinator",))
    assert replica.get_manifests().manifests[-1] == manifest
    assert looked == [Mode.READY]  # the probe answers what is true when it answers
    assert replica.mode is Mode.READY
    with pytest.raises(NotReady, match="already recovered"):
        replica.recover(seed, salt)
