"""`latest-transition`: the workspace's memory of the Coordinator's history (issue 11).

A rolled-back Coordinator is refused, the file is never replaced by an older transition, and
without the file `verify` and `recover` say plainly that rollback could not be checked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import WEB, Cluster
from tests.cli.test_userapi import contrast

NOT_CHECKED = "rollback of the Coordinator's history could not be checked"


def latest(cluster: Cluster) -> Path:
    return cluster.workspace / "latest-transition"


def update_manifest(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> str:
    """Add a SAN to the local manifest and set it; what set wrote to stderr."""
    path = cluster.workspace / "manifest.json"
    document = json.loads(path.read_bytes())
    document["Policies"][WEB.policy_hash.hex()]["SANs"].append("web.example")
    path.write_text(json.dumps(document, indent=2) + "\n")
    code, _, err = contrast(cluster, capsys, "set")
    assert code == 0, err
    return err


def rolled_back(cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> bytes:
    """A ready Coordinator restored to its first manifest after this workspace saw the second.

    Returns the workspace's `latest-transition`, which names the second.
    """
    assert contrast(cluster, capsys, "set")[0] == 0
    snapshot = tmp_path / "snapshot"
    shutil.copytree(cluster.state_dir, snapshot)
    first_manifest = (cluster.workspace / "manifest.json").read_bytes()
    update_manifest(cluster, capsys)
    seen = latest(cluster).read_bytes()
    shutil.rmtree(cluster.state_dir)
    shutil.copytree(snapshot, cluster.state_dir)  # the attacker restores the old volume
    cluster.start()
    # Someone recovers it from a workspace that never saw the update.
    latest(cluster).unlink()
    code, _, err = contrast(cluster, capsys, "recover")
    assert code == 0, err
    latest(cluster).write_bytes(seen)
    (cluster.workspace / "manifest.json").write_bytes(first_manifest)
    return seen


def test_verify_refuses_a_rolled_back_coordinator_and_keeps_the_newer_transition(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seen = rolled_back(cluster, capsys, tmp_path)
    shutil.rmtree(cluster.workspace / "verify", ignore_errors=True)
    code, _, err = contrast(cluster, capsys, "verify")
    assert code == 1
    assert "rolled back" in err
    assert seen.decode().strip() in err
    assert latest(cluster).read_bytes() == seen
    assert not (cluster.workspace / "verify").exists()


def test_set_refuses_to_update_a_rolled_back_coordinator(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seen = rolled_back(cluster, capsys, tmp_path)
    manifest = (cluster.workspace / "manifest.json").read_bytes()
    code, _, err = contrast(cluster, capsys, "set")
    assert code == 1
    assert "rolled back" in err
    assert latest(cluster).read_bytes() == seen
    assert cluster.servers[-1].coordinator.generation == 1
    assert (cluster.workspace / "manifest.json").read_bytes() == manifest


def test_recover_refuses_a_rolled_back_coordinator_and_keeps_the_newer_transition(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seen = rolled_back(cluster, capsys, tmp_path)
    cluster.start()  # back in recovery mode, on the old volume
    code, _, err = contrast(cluster, capsys, "recover")
    assert code == 1
    assert "rolled back" in err
    assert latest(cluster).read_bytes() == seen


def test_verify_without_latest_transition_says_rollback_was_not_checked(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    recorded = latest(cluster).read_bytes()
    latest(cluster).unlink()
    code, _, err = contrast(cluster, capsys, "verify")
    assert code == 0, err
    assert NOT_CHECKED in err
    assert latest(cluster).read_bytes() == recorded  # now it can be checked next time
    code, _, err = contrast(cluster, capsys, "verify")
    assert code == 0
    assert NOT_CHECKED not in err


def test_recover_without_latest_transition_says_rollback_was_not_checked(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    latest(cluster).unlink()
    cluster.start()
    code, out, err = contrast(cluster, capsys, "recover")
    assert code == 0, err
    assert NOT_CHECKED in err
    assert out.strip() == "✔ Coordinator recovered"


def test_a_malformed_latest_transition_is_one_line(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    latest(cluster).write_text("not hex\n")
    code, _, err = contrast(cluster, capsys, "verify")
    assert code == 1
    assert err.count("\n") == 1
    assert "latest-transition" in err
    assert latest(cluster).read_text() == "not hex\n"


def test_a_first_manifest_over_a_remembered_history_says_a_new_history_begins(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    old = latest(cluster).read_text().strip()
    shares = cluster.workspace / "seed-shares.json"
    old_shares = shares.read_bytes()
    shutil.rmtree(cluster.state_dir)  # a new deployment, or a lost volume
    cluster.start()
    code, _, err = contrast(cluster, capsys, "set")
    assert code == 0
    assert "another history" not in err, "the same first manifest is the same history"
    # ... but under a new seed: the shares of the old one are kept, owner-only.
    (kept,) = cluster.workspace.glob("seed-shares.replaced-*.json")
    assert f"the previous ones are kept in {kept}" in err
    assert kept.read_bytes() == old_shares
    assert kept.stat().st_mode & 0o777 == 0o600
    assert shares.read_bytes() != old_shares
    shutil.rmtree(cluster.state_dir)
    cluster.start()
    err = update_manifest(cluster, capsys)  # a first manifest again, now another one
    assert f"last saw transition {old} of another history: a new history begins" in err
    assert latest(cluster).read_text().strip() != old
    assert contrast(cluster, capsys, "verify")[0] == 0
