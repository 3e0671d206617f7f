"""The count stored beside each head (`generations/<transition>`): a restart reads, never walks.

A restarted Coordinator reads the history's length from one entry signed with the head's key,
so its recovery and its first GetManifests read as many entries after 30 updates as after one
(walking the chain back was one read per update: on ConfigMaps a round trip to the API server
each). A count that is altered, moved to another transition or signed by another key is refused;
a history written before counts were stored is walked as before. On both backends: files, and
ConfigMaps on the test cluster's real API server.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Coordinator, Mode
from contrast.coordinator.errors import StoredStateDamaged
from contrast.history.errors import DamagedEntry, HashMismatch
from contrast.history.history import ZERO_HASH, History, Transition, digest
from contrast.history.store import Store
from contrast.manifest.verifier import workload_verifier
from tests.coordinator.conftest import Deployment, policy
from tests.history.test_conformance import KEY, append
from tests.kube.backends import StoreFactory, new_store

__all__ = ["new_store"]


class CountingStore:
    """A store that counts the reads made through it."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.reads: list[str] = []

    def get(self, key: str) -> bytes | None:
        self.reads.append(key)
        return self._store.get(key)

    def put(self, key: str, value: bytes) -> None:
        self._store.put(key, value)

    def put_many(self, entries: Mapping[str, bytes]) -> None:
        self._store.put_many(entries)

    def compare_and_swap(self, key: str, expected: bytes | None, value: bytes) -> None:
        self._store.compare_and_swap(key, expected, value)

    def names(self, kind: str) -> list[str]:
        return self._store.names(kind)

    def describe(self, key: str) -> str:
        return self._store.describe(key)


def test_each_head_stores_the_count_of_its_chain(new_store: StoreFactory) -> None:
    history = History(new_store())
    heads = [append(history, f"manifest {index}".encode()) for index in range(3)]
    reopened = History(new_store())  # nothing remembered: read and checked
    assert [reopened.generation(head, KEY.public_key()) for head in heads] == [1, 2, 3]
    assert reopened.generation(ZERO_HASH, KEY.public_key()) == 0


def test_a_count_altered_moved_or_signed_by_another_key_is_refused(
    new_store: StoreFactory,
) -> None:
    store = new_store()
    history = History(store)
    first, second = (append(history, f"manifest {index}".encode()) for index in range(2))
    key = f"generations/{second.hex()}"
    stored = store.get(key)
    assert stored is not None
    assert stored[:8] == (2).to_bytes(8, "big")

    def refused(value: bytes, error: type[DamagedEntry] = HashMismatch) -> None:
        store.compare_and_swap(key, store.get(key), value)
        with pytest.raises(error, match=r"generations"):
            History(new_store()).generation(second, KEY.public_key())

    refused((5).to_bytes(8, "big") + stored[8:])  # another count, the same signature
    first_entry = store.get(f"generations/{first.hex()}")
    assert first_entry is not None
    refused(first_entry)  # the first transition's count and signature
    other = ec.generate_private_key(ec.SECP384R1())
    foreign = History(new_store())
    foreign.put_transition(Transition(digest(b"m"), ZERO_HASH))  # counts 1 under `other`
    foreign._put_generation(Transition(digest(b"m"), ZERO_HASH).digest, other)
    signed = store.get(f"generations/{Transition(digest(b'm'), ZERO_HASH).digest.hex()}")
    assert signed is not None
    refused((2).to_bytes(8, "big") + signed[8:])  # signed with another seed's key
    refused(stored[:8], DamagedEntry)  # no signature
    refused((0).to_bytes(8, "big") + stored[8:], DamagedEntry)  # not a count
    store.compare_and_swap(key, store.get(key), stored)
    assert History(new_store()).generation(second, KEY.public_key()) == 2


def test_a_head_moved_without_a_count_has_none(new_store: StoreFactory) -> None:
    writer, mover = History(new_store()), History(new_store())
    transition = writer.put_transition(Transition(writer.put_manifest(b"m"), ZERO_HASH))
    mover.set_latest(None, transition, KEY)  # it did not write the transition
    assert History(new_store()).generation(transition, KEY.public_key()) is None


def deployment(directory: Path) -> Deployment:
    names = ("coordinator", "web", "client")
    return Deployment(
        tee=EmulatedSnp(directory / "tee"),
        owner=ec.generate_private_key(ec.SECP384R1()),
        seedshare=rsa.generate_private_key(65537, 2048),
        policies={name: policy(name) for name in names},
        state_dir=directory / "state",
    )


def coordinator_on(store: Store) -> Coordinator:
    return Coordinator(History(store), verifier_for=workload_verifier)


def restart_reads(
    made: Deployment, new_store: StoreFactory, seed: tuple[bytes, bytes], generation: int
) -> tuple[Coordinator, list[str]]:
    """A restarted Coordinator and the kinds of entries its recovery and a GetManifests from
    the head read."""
    head = History(new_store()).get_latest_unverified()
    assert head is not None
    counting = CountingStore(new_store())
    restarted = coordinator_on(counting)
    assert restarted.mode is Mode.RECOVERY
    restarted.recover(*seed, expected_transition_hash=head.transition_hash)
    answer = restarted.get_manifests(since=head.transition_hash)
    assert (answer.generation, restarted.generation) == (generation, generation)
    return restarted, [key.partition("/")[0] for key in counting.reads]


def test_a_restart_reads_as_much_after_30_updates_as_after_one(
    new_store: StoreFactory, tmp_path: Path
) -> None:
    made = deployment(tmp_path)
    coordinator = coordinator_on(new_store())
    result = coordinator.set_manifest(made.manifest(), made.documents())
    assert result.seed_shares is not None
    seed = result.seed_shares.decrypt(made.seedshare), result.seed_shares.salt
    made.update(coordinator, ("coordinator", "web", "client"))
    restarted, one = restart_reads(made, new_store, seed, 2)
    for index in range(29):
        made.update(restarted, ("coordinator", "web", "client")[: 3 - index % 2])
    _, thirty = restart_reads(made, new_store, seed, 31)
    assert sorted(one) == sorted(thirty), f"{one} {thirty}"
    assert len(thirty) < 30  # walking the chain back alone reads 31 transitions


def test_a_history_without_counts_is_counted_by_walking(tmp_path: Path) -> None:
    made = deployment(tmp_path)
    coordinator = made.coordinator()
    result = coordinator.set_manifest(made.manifest(), made.documents())
    assert result.seed_shares is not None
    for _ in range(3):
        made.update(coordinator, ("coordinator", "web"))
    for entry in (made.state_dir / "generations").iterdir():  # as a history written before
        entry.unlink()
    restarted = made.coordinator()
    restarted.recover(result.seed_shares.decrypt(made.seedshare), result.seed_shares.salt)
    assert restarted.get_manifests().generation == 4
    made.update(restarted, ("coordinator", "web"))  # follows an uncounted head: no count
    assert not any((made.state_dir / "generations").iterdir())
    assert restarted.generation == 5


def test_an_altered_count_of_the_head_refuses_recovery(
    new_store: StoreFactory, tmp_path: Path
) -> None:
    made = deployment(tmp_path)
    store = new_store()
    coordinator = coordinator_on(store)
    result = coordinator.set_manifest(made.manifest(), made.documents())
    assert result.seed_shares is not None
    made.update(coordinator, ("coordinator", "web", "client"))
    head = coordinator.get_manifests().latest.transition_hash
    key = f"generations/{head.hex()}"
    stored = store.get(key)
    assert stored is not None
    store.compare_and_swap(key, stored, (7).to_bytes(8, "big") + stored[8:])
    restarted = coordinator_on(new_store())
    with pytest.raises(StoredStateDamaged, match=r"generations.*tampered"):
        restarted.recover(result.seed_shares.decrypt(made.seedshare), result.seed_shares.salt)
    assert restarted.mode is Mode.RECOVERY
