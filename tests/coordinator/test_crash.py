"""Invariant 6: kill -9 at any point of SetManifest leaves the old or the new state, never a mix.

A worker process sets manifests in a loop; the test kills it at random moments, then a fresh
Coordinator over the same volume must recover with the seed to a consistent history.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Mode
from contrast.manifest.model import Manifest
from contrast.seed.shares import SeedShareDocument
from tests.conftest import REPO
from tests.coordinator.conftest import Deployment

KILLS = 6


def write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def test_kill_9_during_set_manifest_leaves_a_recoverable_state(
    tmp_path: Path, tee_dir: Path, emulated_tee: EmulatedSnp, seedshare_key: rsa.RSAPrivateKey
) -> None:
    keys, state = tmp_path / "keys", tmp_path / "state"
    keys.mkdir()
    owner = ec.generate_private_key(ec.SECP384R1())
    write_key(keys / "owner.pem", owner)
    write_key(keys / "seedshare.pem", seedshare_key)
    chooser = random.Random(20261123)
    rounds_seen = []
    for _ in range(KILLS):
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.coordinator.crash_worker", str(state),
             str(tee_dir), str(keys)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert worker.stdout is not None
        worker.stdout.readline()  # at least one update is under way
        time.sleep(chooser.uniform(0.0, 0.3))
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        assert worker.returncode == -signal.SIGKILL, worker.stderr.read() if worker.stderr else ""

        deployment = Deployment(emulated_tee, owner, seedshare_key, {}, state)
        coordinator = deployment.coordinator()
        assert coordinator.mode is Mode.RECOVERY
        leftovers = [path for path in state.rglob(".*") if path.name != ".lock"]
        assert leftovers == [], "the killed writer's temporary files were not removed"
        document = SeedShareDocument.from_json((keys / "seed-shares.json").read_bytes())
        coordinator.recover(document.decrypt(seedshare_key), document.salt)
        history = coordinator.get_manifests()
        assert history.manifests, "the history lost its manifests"
        for manifest in history.manifests:
            Manifest.from_bytes(manifest)
        rounds_seen.append(len(history.manifests))
    assert rounds_seen == sorted(rounds_seen), "a later run saw fewer manifests than an earlier"
