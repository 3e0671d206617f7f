"""One conformance suite for every history backend (files; ConfigMaps through the official client).

Atomicity and compare-and-swap (one winner of any race, the loser's value never written), tamper
and rollback detection, listing, and the 1 MiB entry limit of a ConfigMap, which the history
enforces on every backend so that a history can move between them.
"""

from __future__ import annotations

import threading

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.ca.errors import SealedAuthorityDamaged
from contrast.ca.sealed import sealer_id, unseal
from contrast.history.errors import (
    BadSignature,
    ConcurrentUpdate,
    EntryTooLarge,
    HashMismatch,
)
from contrast.history.history import (
    MAXIMUM_ENTRY_SIZE,
    ZERO_HASH,
    History,
    LatestTransition,
    Transition,
    digest,
)
from contrast.history.store import Store
from tests.kube.backends import StoreFactory, new_store

__all__ = ["new_store"]
KEY = ec.generate_private_key(ec.SECP384R1())


def append(history: History, manifest: bytes) -> bytes:
    latest = history.get_latest_unverified()
    previous = ZERO_HASH if latest is None else latest.transition_hash
    transition_hash = history.put_transition(Transition(history.put_manifest(manifest), previous))
    history.set_latest(latest, transition_hash, KEY)
    return transition_hash


def test_entries_round_trip_and_a_missing_one_is_none(new_store: StoreFactory) -> None:
    store = new_store()
    assert store.get("manifests/abc") is None
    store.put("manifests/abc", b"\x00binary\xff")
    assert new_store().get("manifests/abc") == b"\x00binary\xff"
    assert "abc" in store.describe("manifests/abc")


def test_compare_and_swap_writes_only_over_the_expected_value(new_store: StoreFactory) -> None:
    store = new_store()
    store.compare_and_swap("transitions/latest", None, b"one")
    with pytest.raises(ConcurrentUpdate):
        store.compare_and_swap("transitions/latest", None, b"other first")
    with pytest.raises(ConcurrentUpdate):
        store.compare_and_swap("transitions/latest", b"stale", b"lost")
    assert store.get("transitions/latest") == b"one"
    store.compare_and_swap("transitions/latest", b"one", b"two")
    assert new_store().get("transitions/latest") == b"two"


def race(stores: list[Store], expected: bytes | None, values: list[bytes]) -> list[bytes]:
    """Each store tries to swap in its value at the same moment; the values that were written."""
    barrier = threading.Barrier(len(stores))
    winners: list[bytes] = []

    def attempt(store: Store, value: bytes) -> None:
        barrier.wait()
        try:
            store.compare_and_swap("transitions/latest", expected, value)
            winners.append(value)
        except ConcurrentUpdate:
            pass

    threads = [
        threading.Thread(target=attempt, args=pair) for pair in zip(stores, values, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return winners


def test_of_racing_writers_exactly_one_wins(new_store: StoreFactory) -> None:
    stores = [new_store() for _ in range(6)]
    stores[0].compare_and_swap("transitions/latest", None, b"start")
    for round_number in range(5):
        expected = stores[0].get("transitions/latest")
        values = [f"{round_number}-{i}".encode() for i in range(len(stores))]
        winners = race(stores, expected, values)
        assert len(winners) == 1
        assert stores[-1].get("transitions/latest") == winners[0]


def test_a_lost_head_update_leaves_the_head_and_chain_as_the_winner_wrote_them(
    new_store: StoreFactory,
) -> None:
    history = History(new_store())
    first = append(history, b"m1")
    stale = history.get_latest(KEY.public_key())
    second = append(history, b"m2")
    orphan = history.put_transition(Transition(history.put_manifest(b"loser"), first))
    with pytest.raises(ConcurrentUpdate):
        history.set_latest(stale, orphan, KEY)
    latest = History(new_store()).get_latest(KEY.public_key())
    assert latest.transition_hash == second
    assert History(new_store()).manifests(second) == [b"m1", b"m2"]


def test_tampered_entries_and_heads_are_detected(new_store: StoreFactory) -> None:
    store = new_store()
    history = History(store)
    head = append(history, b"manifest")
    key = f"manifests/{digest(b'manifest').hex()}"
    store.compare_and_swap(key, store.get(key), b"altered")
    with pytest.raises(HashMismatch, match="tampered"):
        history.manifests(head)
    latest = store.get("transitions/latest")
    assert latest is not None
    forged = ec.generate_private_key(ec.SECP384R1())
    store.compare_and_swap(
        "transitions/latest", latest, LatestTransition.sign(head, forged).to_bytes()
    )
    with pytest.raises(BadSignature):
        history.get_latest(KEY.public_key())


def test_listing_names_each_kind(new_store: StoreFactory) -> None:
    history = History(new_store())
    append(history, b"m1")
    append(history, b"m2")
    history.put_policy(b"policy")
    listed = History(new_store())
    assert listed.names("manifests") == sorted([digest(b"m1").hex(), digest(b"m2").hex()])
    assert listed.names("policies") == [digest(b"policy").hex()]
    assert len(listed.names("transitions")) == 3  # two links and the head
    assert listed.names("authorities") == []


def test_an_entry_of_one_mib_is_stored_and_one_byte_more_is_refused(
    new_store: StoreFactory,
) -> None:
    history = History(new_store())
    largest = b"p" * MAXIMUM_ENTRY_SIZE
    assert history.get_policy(history.put_policy(largest)) == largest
    with pytest.raises(EntryTooLarge, match=f"at most {MAXIMUM_ENTRY_SIZE}"):
        history.put_policy(largest + b"p")
    assert history.names("policies") == [digest(largest).hex()]


def test_a_sealed_authority_is_written_once(new_store: StoreFactory) -> None:
    history = History(new_store())
    transition, sealer = b"\x01" * 32, b"\x02" * 16
    assert history.put_authority(transition, b"first", sealer=sealer) == b"first"
    assert History(new_store()).put_authority(transition, b"second", sealer=sealer) == b"first"
    assert history.get_authority(transition, sealer=sealer) == b"first"
    with pytest.raises(SealedAuthorityDamaged, match="sealed CA"):
        unseal(b"k" * 32, transition, b"first", KEY)


def test_each_seed_seals_a_transitions_authority_in_a_slot_of_its_own(
    new_store: StoreFactory,
) -> None:
    """Two seeds reach one first transition (a retry after a crash, two replicas racing): the
    CA one seals is never in the other's way, and each reads back only its own."""
    history = History(new_store())
    transition = b"\x01" * 32
    ours, theirs = sealer_id(b"a" * 32), sealer_id(b"b" * 32)
    assert ours != theirs
    assert history.put_authority(transition, b"lost seed's", sealer=theirs) == b"lost seed's"
    assert history.get_authority(transition, sealer=ours) is None
    assert history.put_authority(transition, b"ours", sealer=ours) == b"ours"
    assert History(new_store()).get_authority(transition, sealer=ours) == b"ours"
    assert History(new_store()).get_authority(transition, sealer=theirs) == b"lost seed's"
    assert len(history.names("authorities")) == 2
