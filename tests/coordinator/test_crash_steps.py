"""Invariant 6, step by step: a SetManifest killed right after any one of its writes is retried.

`crash_step_worker` sends one SetManifest and dies by SIGKILL right after its N-th store write,
for N = 1, 2, ... until a run makes fewer than N; so every point between two writes is hit once,
not by chance. After each death a fresh Coordinator over the same volume gets the same request
(same manifest, previous transition and signer). It must succeed and leave one consistent state:
the head moved once, the mesh CA it answers issues certificates that chain to it, and a restart
recovers to the same head and mesh CA.

The first manifest's seed exists only in the process until its response carries the shares: a
death after its head moved leaves a history nobody can open, and the retry is told so
(`Coordinator._recovery_hint`).
"""

from __future__ import annotations

import itertools
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.atls.reportdata import public_key_der, report_data
from contrast.coordinator.core import Coordinator, Mode, SetManifestResult
from contrast.coordinator.errors import NotReady
from contrast.files import write_atomically
from contrast.history.history import LATEST_KEY, transition_hashes
from contrast.seed.shares import SeedShareDocument
from tests.conftest import REPO
from tests.coordinator.conftest import Deployment
from tests.coordinator.crash_step_worker import (
    SHARES,
    first_names,
    load_deployment,
    recover,
    send,
    updated_names,
)
from tests.coordinator.test_crash import write_key


def run_worker(
    state: Path, tee_dir: Path, keys: Path, kind: str, limit: int
) -> tuple[list[str], bool]:
    """The keys the worker wrote, and whether it died after the `limit`-th."""
    worker = subprocess.run(
        [sys.executable, "-m", "tests.coordinator.crash_step_worker", str(state), str(tee_dir),
         str(keys), kind, str(limit)],
        cwd=REPO, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    lines = worker.stdout.decode().split()
    if worker.returncode == 0:
        assert lines[-1] == "done"
        assert len(lines) - 1 < limit
        return lines[:-1], False
    assert worker.returncode == -signal.SIGKILL, worker.stderr.decode()
    assert len(lines) == limit, lines
    return lines, True


def mesh_certificate_chains_to(
    coordinator: Coordinator, deployment: Deployment, mesh_ca: bytes
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    public_key = public_key_der(key.public_key())
    nonce = coordinator.new_nonce()
    evidence = deployment.issuer("web").issue(report_data(public_key, nonce))
    issued = coordinator.new_mesh_certificate(nonce, public_key, evidence)
    leaf = x509.load_pem_x509_certificates(issued.cert_chain)[0]
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(mesh_ca))
    assert leaf.public_key() == key.public_key()


def shares_of(result: SetManifestResult, keys: Path) -> SeedShareDocument:
    if result.seed_shares is not None:
        return result.seed_shares
    return SeedShareDocument.from_json((keys / SHARES).read_bytes())


def retry_after_death(
    deployment: Deployment, keys: Path, kind: str, before: list[bytes], *, committed: bool
) -> None:
    """The same request on a fresh Coordinator over the dead one's volume, and its state after."""
    previous = transition_hashes(before)[-1] if before else b""
    coordinator = deployment.coordinator()
    if kind.endswith("update"):
        assert coordinator.mode is Mode.RECOVERY
        recover(coordinator, deployment, keys)
    elif committed:  # the seed died with the process that made it
        assert coordinator.mode is Mode.RECOVERY
        with pytest.raises(NotReady, match="recovery mode") as refused:
            send(coordinator, deployment, kind, previous)
        assert "the first of the stored history" in refused.value.explain()
        assert "never answered, its seed was lost" in refused.value.explain()
        return
    else:
        assert coordinator.mode is Mode.NO_MANIFEST

    result = send(coordinator, deployment, kind, previous)

    names = updated_names(kind) if kind.endswith("update") else first_names(kind)
    manifest = deployment.manifest(names)
    expected = [*before, manifest]
    history = coordinator.get_manifests()
    assert history.manifests == expected, "the head did not move exactly once"
    assert history.latest.transition_hash == transition_hashes(expected)[-1]
    assert (history.root_ca, history.mesh_ca) == (result.root_ca, result.mesh_ca)
    mesh_certificate_chains_to(coordinator, deployment, result.mesh_ca)

    shares = shares_of(result, keys)
    restarted = deployment.coordinator()
    assert restarted.mode is Mode.RECOVERY
    restarted.recover(shares.decrypt(deployment.seedshare), shares.salt)
    again = restarted.get_manifests()
    assert (again.manifests, again.latest) == (expected, history.latest)
    assert again.mesh_ca == result.mesh_ca, "a restart serves another mesh CA"
    mesh_certificate_chains_to(restarted, deployment, result.mesh_ca)


# The entries of one SetManifest, in order: the policy packs (none when an update's new
# policies are all in the packs it keeps), the pack index and its pointer, the manifest's chunks
# when it exceeds one entry, the manifest, the transition, the sealed CA, its count and the head.
WRITES = re.compile(
    r"(packs )*policyindexes policysets (chunks )*manifests transitions authorities generations"
    r" transitions"
)


@pytest.mark.parametrize("kind", ["first", "update", "large-first", "large-update"])
def test_a_set_manifest_killed_after_any_write_succeeds_when_retried(
    kind: str, tmp_path: Path, tee_dir: Path, seedshare_key: rsa.RSAPrivateKey
) -> None:
    keys, base = tmp_path / "keys", tmp_path / "base"
    keys.mkdir()
    write_key(keys / "owner.pem", ec.generate_private_key(ec.SECP384R1()))
    write_key(keys / "seedshare.pem", seedshare_key)
    deployment = load_deployment(base, tee_dir, keys, kind)
    before: list[bytes] = []
    if kind.endswith("update"):
        first = deployment.manifest(first_names(kind))
        result = deployment.coordinator().set_manifest(
            first, deployment.documents(first_names(kind))
        )
        assert result.seed_shares is not None
        write_atomically(keys / SHARES, result.seed_shares.to_json(), mode=0o600)
        before = [first]

    steps: list[str] = []
    for limit in itertools.count(1):
        state = tmp_path / f"killed-after-{limit}"
        if base.exists():
            shutil.copytree(base, state)
        writes, killed = run_worker(state, tee_dir, keys, kind, limit)
        if not killed:
            break
        steps.append(writes[-1])
        retry_after_death(
            replace(deployment, state_dir=state),
            keys,
            kind,
            before,
            committed=writes[-1] == LATEST_KEY,
        )
    kinds = " ".join(step.partition("/")[0] for step in steps)
    assert WRITES.fullmatch(kinds), steps
    if kind.startswith("large-"):  # a manifest over 1 MiB is chunked, its 10 000 policies packed
        assert "chunks" in kinds
        assert kind == "large-update" or kinds.count("packs") >= 2
    assert steps[-1] == LATEST_KEY
