"""A manifest of 10 000 workloads: set, stored, followed, recovered, raced and tampered with.

On both backends (files, and ConfigMaps on the test cluster's real API server), with policies of
~300 bytes and of the size `contrast generate` writes (~57 KB): the manifest (about 1.9 MB) is
stored in chunks and its 10 000 policy documents in delta packs, no object over the 1 MiB a
ConfigMap holds. Altering any stored byte of them is refused on recovery, naming the entry;
a restored older state is refused as a rollback. The crash steps (`test_crash_steps`) run the same
manifest killed after each of its writes.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Coordinator, Mode
from contrast.coordinator.errors import PermissionDenied, StoredStateDamaged
from contrast.history.history import (
    KINDS,
    MAXIMUM_ENTRY_SIZE,
    History,
    digest,
    transition_hashes,
)
from contrast.history.store import Store
from contrast.manifest.verifier import workload_verifier
from tests.coordinator.conftest import Deployment, policy
from tests.coordinator.crash_step_worker import LARGE, generated_policy, large_policy
from tests.coordinator.test_replicas import certificate, race
from tests.kube.backends import StoreFactory, new_store

__all__ = ["new_store"]

FIRST = ("coordinator", "web", *LARGE)
UPDATED = ("coordinator", "client", *LARGE)


# The policies of the 10 000 workloads: ~300 bytes each, every one unlike the others, or as
# `contrast generate` writes them (~57 KB, the same rules around each pod's data: 568 MB), and
# how many delta packs hold them. The tests of what is stored run on both (`BOTH_SHAPES`); the
# race and GetManifests' ranges, about replicas and transitions, on the first.
SHAPES = {"300-byte": (large_policy, 2), "generated": (generated_policy, 4)}
BOTH_SHAPES = pytest.mark.parametrize("shape", SHAPES, indirect=True)


@pytest.fixture(scope="module")
def shape(request: pytest.FixtureRequest) -> str:
    name: str = getattr(request, "param", "300-byte")
    return name


@pytest.fixture(scope="module")
def large_policies(shape: str) -> dict[str, bytes]:
    make, _ = SHAPES[shape]
    policies = {name: policy(name) for name in ("coordinator", "web", "client", "rogue")}
    return policies | {name: make(name) for name in LARGE}


@pytest.fixture
def large(
    emulated_tee: EmulatedSnp,
    seedshare_key: rsa.RSAPrivateKey,
    tmp_path: Path,
    large_policies: dict[str, bytes],
) -> Deployment:
    return Deployment(
        tee=emulated_tee,
        owner=ec.generate_private_key(ec.SECP384R1()),
        seedshare=seedshare_key,
        policies=large_policies,
        state_dir=tmp_path / "state",
    )


def on(new_store: StoreFactory) -> tuple[Coordinator, Store]:
    store = new_store()
    return Coordinator(History(store), verifier_for=workload_verifier), store


def set_first(deployment: Deployment, coordinator: Coordinator) -> tuple[bytes, bytes]:
    result = coordinator.set_manifest(deployment.manifest(FIRST), deployment.documents(FIRST))
    assert result.seed_shares is not None
    return result.seed_shares.decrypt(deployment.seedshare), result.seed_shares.salt


@BOTH_SHAPES
def test_a_manifest_of_10000_policies_is_stored_in_entries_of_at_most_1_mib_and_recovered(
    large: Deployment, new_store: StoreFactory, shape: str
) -> None:
    coordinator, store = on(new_store)
    manifest = large.manifest(FIRST)
    assert len(manifest) > MAXIMUM_ENTRY_SIZE  # refused as one entry before chunks
    seed, salt = set_first(large, coordinator)
    large.update(coordinator, UPDATED)
    sizes = {
        f"{kind}/{name}": len(store.get(f"{kind}/{name}") or b"")
        for kind in KINDS
        for name in store.names(kind)
    }
    assert max(sizes.values()) <= MAXIMUM_ENTRY_SIZE
    assert sum(key.startswith("chunks/") for key in sizes) == 4  # two manifests of two chunks
    # 10 002 documents in their delta packs; the update kept them and packed its one new
    # policy alone.
    assert sum(key.startswith("packs/") for key in sizes) == SHAPES[shape][1] + 1, sorted(sizes)
    assert not any(key.startswith("policies/") for key in sizes)

    restarted, _ = on(new_store)
    assert restarted.mode is Mode.RECOVERY
    restarted.recover(seed, salt)
    history = restarted.get_manifests()
    assert history.manifests == [manifest, large.manifest(UPDATED)]
    assert sorted(history.policies) == sorted(large.documents(UPDATED))
    assert certificate(large, restarted, "w9999").mesh_ca == history.mesh_ca
    assert certificate(large, restarted, "client").mesh_ca == history.mesh_ca


def test_replicas_racing_on_10000_policy_updates_leave_one_winner(
    large: Deployment, new_store: StoreFactory
) -> None:
    first, _ = on(new_store)
    second, _ = on(new_store)
    seed, salt = set_first(large, first)
    second.recover(seed, salt)
    winners = [large.manifest(FIRST)]
    for round_ in range(2):
        head = first.get_manifests().latest.transition_hash
        extra = ("client",) if round_ else ("rogue",)
        won, lost = race(large, [(first, UPDATED), (second, (*FIRST, *extra))], head)
        assert (len(won), len(lost)) == (1, 1)
        winners += won
    for replica in (first, second):
        history = replica.get_manifests()
        assert history.manifests == winners
        assert transition_hashes(winners)[-1] == history.latest.transition_hash


def altered(data: bytes) -> bytes:
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x01
    return bytes(flipped)


@BOTH_SHAPES
@pytest.mark.parametrize(
    "kind", ["chunks", "manifests", "packs", "policyindexes", "policysets", "generations"]
)
def test_any_altered_entry_of_a_10000_policy_manifest_is_refused_on_recovery(
    large: Deployment, new_store: StoreFactory, kind: str
) -> None:
    coordinator, store = on(new_store)
    seed, salt = set_first(large, coordinator)
    for name in store.names(kind):
        key = f"{kind}/{name}"
        current = store.get(key)
        assert current is not None
        store.compare_and_swap(key, current, altered(current))
    restarted, _ = on(new_store)
    with pytest.raises(StoredStateDamaged, match=r"tampered|no entry|no policy|not a hash"):
        restarted.recover(seed, salt)
    assert restarted.mode is Mode.RECOVERY


@BOTH_SHAPES
def test_a_truncated_or_deleted_pack_is_named(large: Deployment, shape: str) -> None:
    coordinator = large.coordinator()
    seed, salt = set_first(large, coordinator)
    packs = sorted((large.state_dir / "packs").iterdir())
    assert len(packs) == SHAPES[shape][1]
    packs[1].write_bytes(packs[1].read_bytes()[:-3])
    with pytest.raises(StoredStateDamaged, match=f"packs/{packs[1].name}"):
        large.coordinator().recover(seed, salt)
    packs[1].unlink()
    with pytest.raises(StoredStateDamaged, match=f"packs/{packs[1].name}"):
        large.coordinator().recover(seed, salt)


@BOTH_SHAPES
def test_a_restored_older_state_of_10000_policies_is_refused_as_a_rollback(
    large: Deployment, tmp_path: Path
) -> None:
    coordinator = large.coordinator()
    seed, salt = set_first(large, coordinator)
    older = tmp_path / "older"
    shutil.copytree(large.state_dir, older)
    large.update(coordinator, UPDATED)
    seen = coordinator.get_manifests().latest.transition_hash
    restored = replace(large, state_dir=older).coordinator()
    with pytest.raises(PermissionDenied, match="rolled back or replaced"):
        restored.recover(seed, salt, expected_transition_hash=seen)
    assert restored.mode is Mode.RECOVERY


def test_get_manifests_since_a_known_head_sends_only_what_followed(large: Deployment) -> None:
    coordinator = large.coordinator()
    set_first(large, coordinator)
    heads = [coordinator.get_manifests().latest.transition_hash]
    for names in (UPDATED, FIRST, UPDATED):
        large.update(coordinator, names)
        heads.append(coordinator.get_manifests().latest.transition_hash)
    whole = coordinator.get_manifests()
    assert len(whole.manifests) == whole.generation == 4
    after = coordinator.get_manifests(since=heads[1])
    assert after.manifests == whole.manifests[2:]
    assert after.previous_transition_hash == heads[1]
    assert transition_hashes(after.manifests, start=heads[1])[-1] == whole.latest.transition_hash
    # At the head: the active manifest alone, after the transition it follows.
    current = coordinator.get_manifests(since=heads[3])
    assert (current.manifests, current.previous_transition_hash) == ([whole.manifests[3]], heads[2])
    # A transition the history lacks: everything, from the root.
    unknown = coordinator.get_manifests(since=digest(b"elsewhere"))
    assert unknown.manifests == whole.manifests
    assert sorted(unknown.policies) == sorted(large.documents(UPDATED))
