"""`recover` asks GetManifests without the policy documents, and still checks the history.

Its checks (no rollback past the head the workspace saw, the chain up to the Coordinator's head)
read only the manifests and the head, as `set`'s do; the documents would be ~545 MB at 10 000
real-size workloads. A Coordinator that forges the active manifest in that answer, or that was
rolled back (tests/cli/test_rollback.py), is still refused, and the workspace keeps its head.
"""

from __future__ import annotations

import dataclasses

import pytest

from contrast.coordinator.core import ManifestHistory
from tests.cli.conftest import Cluster
from tests.cli.test_history_paging import update, watch_policies
from tests.cli.test_userapi import contrast


def test_recover_asks_without_the_policy_documents(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    update(cluster, capsys, 0)
    cluster.start()  # a restart: recovery mode
    answered = watch_policies(cluster)
    code, _, err = contrast(cluster, capsys, "recover")
    assert code == 0, err
    assert answered == [(False, 0)]
    assert contrast(cluster, capsys, "verify")[0] == 0  # and verify still gets them


def test_recover_without_the_policy_documents_still_refuses_a_forged_manifest(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    update(cluster, capsys, 0)
    head = (cluster.workspace / "latest-transition").read_text()
    cluster.start()
    coordinator = cluster.servers[-1].coordinator
    original = coordinator.get_manifests
    asked: list[bool] = []

    def forged(*, since: bytes = b"", policies: bool = True) -> ManifestHistory:
        """A Coordinator whose answer swaps the active manifest for another, same head."""
        asked.append(policies)
        history = original(since=since, policies=policies)
        swapped = history.manifests[-1].replace(b"web0.example", b"evil.example")
        assert swapped != history.manifests[-1]
        return dataclasses.replace(history, manifests=[*history.manifests[:-1], swapped])

    coordinator.get_manifests = forged  # type: ignore[method-assign]
    code, _, err = contrast(cluster, capsys, "recover")
    assert code == 1
    assert "do not hash to the latest transition" in err
    assert len(err.strip().splitlines()) <= 2  # the error and its hint, no traceback
    assert asked == [False]
    assert (cluster.workspace / "latest-transition").read_text() == head
