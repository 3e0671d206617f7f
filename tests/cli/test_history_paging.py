"""`set`, `verify` and `recover` fetch only the manifests after the head the workspace saw.

GetManifests with `Since` answers from that transition on, so their cost follows the updates a
workspace missed, not the history's length; `verify/` still ends up holding every manifest, and
a request without `Since` (the original's clients) still gets the whole history
(tests/coordinator/test_large_manifest.py).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from contrast.coordinator.core import ManifestHistory
from tests.cli.conftest import WEB, Cluster
from tests.cli.test_userapi import contrast

UPDATES = 6


def watch(cluster: Cluster) -> list[tuple[bytes, int]]:
    """Record each GetManifests the Coordinator answers: its Since and how many it sent."""
    coordinator = cluster.servers[-1].coordinator
    answered: list[tuple[bytes, int]] = []
    original = coordinator.get_manifests

    def recording(*, since: bytes = b"", policies: bool = True) -> ManifestHistory:
        history = original(since=since, policies=policies)
        answered.append((since, len(history.manifests)))
        return history

    coordinator.get_manifests = recording  # type: ignore[method-assign]
    return answered


def update(cluster: Cluster, capsys: pytest.CaptureFixture[str], index: int) -> None:
    path = cluster.workspace / "manifest.json"
    document = json.loads(path.read_bytes())
    document["Policies"][WEB.policy_hash.hex()]["SANs"].append(f"web{index}.example")
    path.write_text(json.dumps(document, indent=2) + "\n")
    code, _, err = contrast(cluster, capsys, "set")
    assert code == 0, err


def test_set_and_verify_fetch_only_what_followed_and_verify_keeps_every_manifest(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    assert contrast(cluster, capsys, "verify")[0] == 0
    answered = watch(cluster)
    manifests = [(cluster.workspace / "verify" / "manifest.0.json").read_bytes()]
    for index in range(UPDATES):
        update(cluster, capsys, index)
        manifests.append((cluster.workspace / "manifest.json").read_bytes())
    # Each set: one GetManifests before (the active manifest alone) and one after (the new one
    # alone, after the head the workspace saw).
    assert [count for _, count in answered] == [1, 1] * UPDATES
    assert all(since for since, _ in answered)

    answered.clear()
    code, _, err = contrast(cluster, capsys, "verify")
    assert code == 0, err
    # From the head verify/ last held: the UPDATES manifests after it, not the whole history.
    assert [count for _, count in answered] == [UPDATES]
    verify = cluster.workspace / "verify"
    written = [verify / f"manifest.{index}.json" for index in range(UPDATES + 1)]
    assert [path.read_bytes() for path in written] == manifests
    assert not (verify / f"manifest.{UPDATES + 1}.json").exists()


def test_verify_fetches_the_whole_history_when_verify_lacks_the_older_manifests(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    assert contrast(cluster, capsys, "verify")[0] == 0
    update(cluster, capsys, 0)
    update(cluster, capsys, 1)
    (cluster.workspace / "verify" / "manifest.0.json").unlink()
    answered = watch(cluster)
    assert contrast(cluster, capsys, "verify")[0] == 0
    assert [count for _, count in answered] == [2, 3]
    assert (cluster.workspace / "verify" / "manifest.0.json").is_file()


def test_recover_fetches_only_what_followed_the_workspaces_head(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    for index in range(3):
        update(cluster, capsys, index)
    head = (cluster.workspace / "latest-transition").read_text().strip()
    cluster.start()  # a restart: recovery mode
    answered = watch(cluster)
    code, _, err = contrast(cluster, capsys, "recover")
    assert code == 0, err
    # From the head the workspace saw: the active manifest alone, not the four.
    assert answered == [(bytes.fromhex(head), 1)]
    assert (cluster.workspace / "latest-transition").read_text().strip() == head
    assert contrast(cluster, capsys, "verify")[0] == 0


def watch_policies(cluster: Cluster) -> list[tuple[bool, int]]:
    """Record each GetManifests: whether it asked for the policy documents, and how many came."""
    coordinator = cluster.servers[-1].coordinator
    answered: list[tuple[bool, int]] = []
    original = coordinator.get_manifests

    def recording(*, since: bytes = b"", policies: bool = True) -> ManifestHistory:
        history = original(since=since, policies=policies)
        answered.append((policies, len(history.policies)))
        return history

    coordinator.get_manifests = recording  # type: ignore[method-assign]
    return answered


def test_set_asks_without_the_policy_documents_and_verify_with_them(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    answered = watch_policies(cluster)
    assert contrast(cluster, capsys, "set")[0] == 0
    update(cluster, capsys, 0)
    # A first set (no manifest yet: the first call fails), then an update: before and after.
    assert answered == [(False, 0)] * 3

    answered.clear()
    code, _, err = contrast(cluster, capsys, "verify")
    assert code == 0, err
    assert answered == [(True, 2)]
    written = sorted(p.name for p in (cluster.workspace / "verify").glob("initdata.*.toml"))
    assert len(written) == 2


def test_set_without_the_policy_documents_still_refuses_a_tampered_history(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    update(cluster, capsys, 0)
    head = (cluster.workspace / "latest-transition").read_text()
    coordinator = cluster.servers[-1].coordinator
    original = coordinator.get_manifests
    asked: list[bool] = []

    def tampered(*, since: bytes = b"", policies: bool = True) -> ManifestHistory:
        """A Coordinator whose answer swaps the active manifest for another, same head."""
        asked.append(policies)
        history = original(since=since, policies=policies)
        forged = history.manifests[-1].replace(b"web0.example", b"evil.example")
        assert forged != history.manifests[-1]
        return dataclasses.replace(history, manifests=[*history.manifests[:-1], forged])

    coordinator.get_manifests = tampered  # type: ignore[method-assign]
    code, _, err = contrast(cluster, capsys, "set")
    assert code == 1
    assert "do not hash to the latest transition" in err
    assert len(err.strip().splitlines()) <= 2  # the error and its hint, no traceback
    assert asked == [False]  # refused before SetManifest, on the answer without documents
    assert (cluster.workspace / "latest-transition").read_text() == head
