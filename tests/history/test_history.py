"""History: content addressing, the signed head, compare-and-swap, and tamper detection."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.history.errors import BadSignature, ConcurrentUpdate, HashMismatch, HistoryError
from contrast.history.history import ZERO_HASH, History, Transition, digest
from contrast.history.store import FileSystemStore, MemoryStore

KEY = ec.generate_private_key(ec.SECP384R1())


def append(history: History, manifest: bytes) -> bytes:
    """One SetManifest's worth of history writes; returns the new transition hash."""
    latest = history.get_latest_unverified()
    previous = ZERO_HASH if latest is None else latest.transition_hash
    transition_hash = history.put_transition(Transition(history.put_manifest(manifest), previous))
    history.set_latest(latest, transition_hash, KEY)
    return transition_hash


@pytest.fixture(params=["memory", "files"])
def history(request: pytest.FixtureRequest, tmp_path: Path) -> History:
    store = MemoryStore() if request.param == "memory" else FileSystemStore(tmp_path / "state")
    return History(store)


def test_chain_of_manifests(history: History) -> None:
    for manifest in (b"one", b"two", b"three"):
        head = append(history, manifest)
    latest = history.get_latest(KEY.public_key())
    assert latest.transition_hash == head
    assert history.manifests(head) == [b"one", b"two", b"three"]
    generations = list(history.walk(head))
    assert len(generations) == 3
    assert generations[-1][1].previous_transition_hash == ZERO_HASH


def test_head_signed_by_another_key_is_refused(history: History) -> None:
    append(history, b"one")
    with pytest.raises(BadSignature, match="not signed by this Coordinator's seed"):
        history.get_latest(ec.generate_private_key(ec.SECP384R1()).public_key())


def test_lost_compare_and_swap(history: History) -> None:
    append(history, b"one")
    stale = history.get_latest_unverified()
    append(history, b"two")
    with pytest.raises(ConcurrentUpdate):
        history.set_latest(stale, digest(b"x"), KEY)


def test_first_head_must_not_exist(history: History) -> None:
    append(history, b"one")
    with pytest.raises(ConcurrentUpdate):
        history.set_latest(None, digest(b"x"), KEY)


def test_tampered_manifest_is_detected(tmp_path: Path) -> None:
    history = History(FileSystemStore(tmp_path))
    head = append(history, b'{"Policies": {}}')
    manifest_hash = history.get_transition(head).manifest_hash
    path = tmp_path / "manifests" / manifest_hash.hex()
    path.write_bytes(path.read_bytes().replace(b"{}", b"[]"))
    with pytest.raises(HashMismatch, match="does not hash to its name"):
        history.manifests(head)


def test_flipped_byte_in_the_head_is_detected(tmp_path: Path) -> None:
    history = History(FileSystemStore(tmp_path))
    append(history, b"one")
    head = tmp_path / "transitions" / "latest"
    data = bytearray(head.read_bytes())
    data[5] ^= 0x01
    head.write_bytes(bytes(data))
    with pytest.raises(BadSignature):
        history.get_latest(KEY.public_key())


def test_missing_entry_is_an_error(history: History) -> None:
    with pytest.raises(HistoryError, match="no entry"):
        history.get_manifest(digest(b"absent"))


def test_files_are_owner_only(tmp_path: Path) -> None:
    history = History(FileSystemStore(tmp_path))
    append(history, b"one")
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != ".lock":
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


@pytest.mark.parametrize("key", ["latest", "a/b/c", "../x/y", "a/b c", ""])
def test_invalid_keys_are_refused(key: str) -> None:
    with pytest.raises(HistoryError, match="invalid history key"):
        MemoryStore().get(key)


def test_truncated_transition_is_refused() -> None:
    with pytest.raises(HistoryError, match="64 bytes"):
        Transition.from_bytes(b"\0" * 63)
