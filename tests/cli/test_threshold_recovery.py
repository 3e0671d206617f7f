"""`contrast recover` with threshold seed shares, against a real Coordinator on loopback."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from contrast.client.workspace import (
    generate_seedshare_owner_key,
    load_seedshare_owner_public_key,
)
from contrast.seed.shares import public_key_hex
from tests.cli.conftest import Cluster
from tests.cli.test_userapi import contrast, run


def _owners(cluster: Cluster, count: int, threshold: int) -> list[Path]:
    """`count` seed share owner keys in the workspace, and a manifest that needs `threshold`."""
    keys = []
    for number in range(count):
        path = cluster.workspace / f"owner-{number}.pem"
        path.write_bytes(generate_seedshare_owner_key())
        keys.append(path)
    manifest_path = cluster.workspace / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["SeedshareOwnerPubKeys"] = [
        public_key_hex(load_seedshare_owner_public_key(path)) for path in keys
    ]
    manifest["SeedshareThreshold"] = threshold
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return keys


def _restart(cluster: Cluster) -> None:
    cluster.start()  # same state: the Coordinator comes back in recovery mode


def test_two_of_three_owners_recover_and_one_does_not(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = _owners(cluster, 3, 2)
    assert contrast(cluster, capsys, "set")[0] == 0
    shares = json.loads((cluster.workspace / "seed-shares.json").read_text())
    assert len(shares["SeedShares"]) == 3
    _restart(cluster)

    code, _, err = contrast(cluster, capsys, "recover", "--seedshare-owner-key", str(keys[0]))
    assert code == 1
    assert err.count("\n") == 1
    assert "SeedshareThreshold is 2: 1 different seed shares are not enough" in err

    code, out, err = contrast(
        cluster, capsys, "recover",
        "--seedshare-owner-key", str(keys[0]), "--seedshare-owner-key", str(keys[2]),
    )  # fmt: skip
    assert (code, err) == (0, ""), err
    assert "Coordinator recovered" in out
    assert contrast(cluster, capsys, "verify")[0] == 0


def test_owners_open_their_shares_apart_and_one_operator_recovers(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    keys = _owners(cluster, 3, 2)
    assert contrast(cluster, capsys, "set")[0] == 0
    _restart(cluster)
    opened = []
    for number in (1, 2):  # each owner alone, without the Coordinator
        target = tmp_path / f"share-{number}.txt"
        code, _, err = run(
            capsys, "recover", "--workspace-dir", str(cluster.workspace),
            "--seedshare-owner-key", str(keys[number]), "--decrypt-share-to", str(target),
        )  # fmt: skip
        assert (code, err) == (0, ""), err
        assert stat.S_IMODE(target.stat().st_mode) == 0o600
        assert len(target.read_text().split()) > 20  # a SLIP-0039 mnemonic
        opened.append(target)
    tampered = tmp_path / "tampered.txt"
    words = opened[1].read_text().split()
    words[12] = "academic" if words[12] != "academic" else "acid"
    tampered.write_text(" ".join(words) + "\n")
    code, _, err = contrast(
        cluster, capsys, "recover", "--share", str(opened[0]), "--share", str(tampered)
    )
    assert code == 1
    assert "the seed shares do not give the seed" in err
    code, _, err = contrast(
        cluster, capsys, "recover", "--share", str(opened[0]), "--share", str(opened[1])
    )
    assert (code, err) == (0, ""), err


def test_an_update_cannot_change_the_threshold(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    _owners(cluster, 3, 2)
    assert contrast(cluster, capsys, "set")[0] == 0
    manifest_path = cluster.workspace / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["SeedshareThreshold"] = 3
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    code, _, err = contrast(cluster, capsys, "set")
    assert code == 1
    assert "cannot change SeedshareThreshold" in err


@pytest.mark.parametrize(("threshold", "owners"), [(0, 1), (3, 2), (17, 17)])
def test_a_manifest_with_an_impossible_threshold_is_refused(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], threshold: int, owners: int
) -> None:
    manifest_path = cluster.workspace / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    key = rsa.generate_private_key(65537, 2048).public_key()
    manifest["SeedshareOwnerPubKeys"] = [public_key_hex(key)] * owners
    manifest["SeedshareThreshold"] = threshold
    manifest_path.write_text(json.dumps(manifest))
    code, _, err = contrast(cluster, capsys, "set")
    assert code == 1
    assert "SeedshareThreshold" in err
    assert err.count("\n") == 1
