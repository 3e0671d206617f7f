"""Batches of entries on files (`FileSystemStore.put_many`): one sync, and still crash-safe.

A manifest's policy packs, index and pointer, and a chunked manifest's chunks and index, are
written as one batch each: their data unsynced, one `syncfs`, then the renames, then each
directory's fsync (`contrast.files.write_all_atomically`), all before the head can move. Two
things make that as safe as an `fsync` per entry:
- the order, seen by an audit hook on the real calls: every temporary file of a batch is created
  before its `syncfs`, every rename comes after it, the pointer last;
- a SetManifest of 10 000 policies killed with SIGKILL before any sync or rename of its batches
  leaves a store whose every entry is whole, the old head, and the same request succeeds on a
  fresh Coordinator (`tests.coordinator.test_crash_steps.retry_after_death`: the head moves
  once, certificates chain to the answered mesh CA, a restart recovers the same).
A power cut between the steps is what the order guarantees; no test here can cut the power.
And on every backend a 10 000-policy history altered in any of its entries is refused.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast import syncfs
from contrast.files import write_atomically
from contrast.history.errors import HistoryError
from contrast.history.history import (
    LATEST_KEY,
    MAXIMUM_ENTRY_SIZE,
    ZERO_HASH,
    History,
    Transition,
    digest,
)
from contrast.history.store import FileSystemStore
from tests import fileevents
from tests.conftest import REPO
from tests.coordinator.crash_step_worker import (
    SHARES,
    first_names,
    generated_policy,
    load_deployment,
)
from tests.coordinator.test_crash import write_key
from tests.coordinator.test_crash_steps import retry_after_death
from tests.kube.backends import StoreFactory, new_store

__all__ = ["new_store"]

POLICIES = 10_000
BATCHED = ("packs", "policyindexes", "policysets", "chunks", "manifests")


@pytest.fixture(scope="module")
def tee_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tee")


@pytest.fixture(scope="module")
def seedshare_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(65537, 2048)


@pytest.fixture
def events() -> Iterator[list[tuple[str, str]]]:
    yield from fileevents.recording()


def documents(count: int) -> dict[bytes, bytes]:
    texts = [b"%d:" % index + os.urandom(300) for index in range(count)]
    return {digest(text): text for text in texts}


def generated(count: int) -> dict[bytes, bytes]:
    """`count` policies of the size and shape `contrast generate` writes (~57 KB each)."""
    texts = [generated_policy(f"w{index}") for index in range(count)]
    return {digest(text): text for text in texts}


SHAPES = {"random": documents, "generated": generated}


def test_the_packs_of_10000_policies_are_synced_once_before_their_renames(
    tmp_path: Path, events: list[tuple[str, str]]
) -> None:
    assert syncfs.available(), f"syncfs without error reports on Linux {os.uname().release}"
    history = History(FileSystemStore(tmp_path / "state"))
    written = documents(POLICIES)
    manifest = os.urandom(32)
    history.put_policies(manifest, written)
    assert History(FileSystemStore(tmp_path / "state")).get_policies(manifest, written) == written

    kinds = [kind for kind, _ in events]
    assert kinds.count("syncfs") == 1
    sync = kinds.index("syncfs")
    temporaries = [i for i, (kind, path) in enumerate(events) if kind == "open" and ".tmp" in path]
    renames = [i for i, kind in enumerate(kinds) if kind == "rename"]
    packs = len(os.listdir(tmp_path / "state" / "packs"))
    assert packs >= 3  # 10 000 documents of ~300 bytes: several packs of at most 1 MiB
    assert len(temporaries) == len(renames) == packs + 2  # and the index and the pointer
    assert max(temporaries) < sync < min(renames)
    assert events[renames[-1]][1].endswith(f"policysets/{manifest.hex()}")
    for kind in ("packs", "policyindexes", "policysets"):
        directory = str(tmp_path / "state" / kind)
        opened = [i for i, event in enumerate(events) if event == ("open", directory)]
        # Opened before its first write (the descriptor syncfs reports writeback errors on),
        # and after the last rename for its fsync.
        assert opened[0] < min(temporaries)
        assert opened[-1] > max(renames)


def test_each_entry_is_synced_where_syncfs_cannot_report_errors(
    tmp_path: Path, events: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(syncfs, "available", lambda: False)
    history = History(FileSystemStore(tmp_path / "state"))
    written = documents(3000)
    history.put_policies(b"\x01" * 32, written)
    assert history.get_policies(b"\x01" * 32, written) == written
    assert ("syncfs", "") not in events


def test_10000_generated_policies_are_stored_in_a_few_mb(tmp_path: Path) -> None:
    """568 MB of generated-size policies (the same rules around each pod's data) are a few MB of
    delta packs, each an entry, and read back whole (each document re-hashed)."""
    history = History(FileSystemStore(tmp_path / "state"))
    written = generated(POLICIES)
    sent = sum(map(len, written.values()))
    history.put_policies(b"\x01" * 32, written)
    packs = [path.stat().st_size for path in (tmp_path / "state" / "packs").iterdir()]
    assert max(packs) <= MAXIMUM_ENTRY_SIZE
    assert sum(packs) < sent / 100, (sum(packs), sent)
    assert History(FileSystemStore(tmp_path / "state")).get_policies(b"\x01" * 32, written) == (
        written
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_any_entry_of_a_10000_policy_history_altered_is_refused(
    new_store: StoreFactory, shape: str
) -> None:
    """On every backend: the chunked manifest, the packs, the index, its pointer, the transition
    and the head of a 10 000-policy history (random documents: a pack holds them whole; generated
    ones: as deltas), each altered by one bit in turn, fail the read: the last byte of each, and
    for a pack also its first and a byte in its middle."""
    store = new_store()
    history = History(store)
    key = ec.generate_private_key(ec.SECP384R1())
    manifest = os.urandom(MAXIMUM_ENTRY_SIZE + 900_000)  # a 10 000-workload manifest's size
    written = SHAPES[shape](POLICIES)
    history.put_policies(digest(manifest), written)
    transition = history.put_transition(Transition(history.put_manifest(manifest), ZERO_HASH))
    history.set_latest(None, transition, key)

    def read() -> None:
        reader = History(new_store())
        head = reader.get_latest(key.public_key()).transition_hash
        assert reader.manifests(head) == [manifest]
        assert reader.get_policies(digest(manifest), written) == written

    read()
    targets = [LATEST_KEY] + [
        f"{kind}/{store.names(kind)[0]}"
        for kind in ("chunks", "manifests", "packs", "policyindexes", "policysets", "transitions")
    ]
    assert len(store.names("packs")) >= 3
    flips = [(target, -1) for target in targets]
    flips += [(f"packs/{store.names('packs')[-1]}", at) for at in (0, MAXIMUM_ENTRY_SIZE // 3)]
    for target, position in flips:
        original = store.get(target)
        assert original is not None
        at = position % len(original)
        altered = original[:at] + bytes([original[at] ^ 1]) + original[at + 1 :]
        store.compare_and_swap(target, original, altered)
        with pytest.raises(HistoryError):
            read()
        store.compare_and_swap(target, altered, original)
    read()


# Sends one SetManifest of KIND (crash_step_worker's) on a FileSystemStore and dies by SIGKILL
# just before the STEP-th NTH event once the request is under way: "syncfs" (a batch's sync),
# "rename" (any entry put in place), or never ("none"). Each event is printed before it happens.
VICTIM = """
import os, signal, sys
from pathlib import Path
from contrast import syncfs
from contrast.coordinator.core import Coordinator
from contrast.history.history import History
from contrast.history.store import FileSystemStore
from contrast.manifest.verifier import workload_verifier
from tests.coordinator.crash_step_worker import load_deployment, recover, send

state, tee, keys = (Path(argument) for argument in sys.argv[1:4])
kind, step, nth = sys.argv[4], sys.argv[5], int(sys.argv[6])
armed = False
seen = {"syncfs": 0, "rename": 0}

def hook(event, arguments):
    if not armed:
        return
    if event == syncfs.AUDIT_EVENT:
        name, what = "syncfs", ""
    elif event == "os.rename":
        name, what = "rename", str(arguments[1])
    else:
        return
    print(name, what, flush=True)
    seen[name] += 1
    if (name, seen[name]) == (step, nth):
        os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(hook)
deployment = load_deployment(state, tee, keys, kind)
coordinator = Coordinator(History(FileSystemStore(state)), verifier_for=workload_verifier)
previous = b""
if kind.endswith("update"):
    recover(coordinator, deployment, keys)
    previous = coordinator.get_manifests().latest.transition_hash
armed = True
send(coordinator, deployment, kind, previous)
print("done", flush=True)
"""


def run_victim(state: Path, tee: Path, keys: Path, kind: str, *, step: str, nth: int) -> list[str]:
    """The events the victim printed; it must have died at the one asked for, if any."""
    victim = subprocess.run(
        [sys.executable, "-c", VICTIM, str(state), str(tee), str(keys), kind, step, str(nth)],
        cwd=REPO, capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    lines = victim.stdout.decode().splitlines()
    if step == "none":
        assert victim.returncode == 0, victim.stderr.decode()
        assert lines[-1] == "done"
        return lines[:-1]
    assert victim.returncode == -signal.SIGKILL, victim.stderr.decode()
    assert sum(line.startswith(step) for line in lines) == nth
    return lines


def entries(state: Path) -> dict[str, bytes]:
    return {
        f"{kind}/{path.name}": path.read_bytes()
        for kind in BATCHED
        if (state / kind).is_dir()
        for path in (state / kind).iterdir()
        if not path.name.startswith(".")
    }


def kill_points(lines: list[str]) -> list[tuple[str, int]]:
    """Each batch's sync, and the first and the last rename of each run of batched renames."""
    points = [("syncfs", n) for n in range(1, sum(line == "syncfs " for line in lines) + 1)]
    renames = [line.split()[1] for line in lines if line.startswith("rename")]
    batched = [Path(target).parent.name in BATCHED for target in renames]
    for index, inside in enumerate(batched):
        first = inside and (index == 0 or not batched[index - 1])
        last = inside and (index + 1 == len(batched) or not batched[index + 1])
        if first or last:
            points.append(("rename", index + 1))
    return points


@pytest.mark.parametrize(
    "kind", ["large-first", "large-update", "generated-first", "generated-update"]
)
def test_a_set_manifest_of_10000_policies_killed_inside_a_batch_succeeds_when_retried(
    kind: str,
    tmp_path: Path,
    tee_dir: Path,
    seedshare_key: rsa.RSAPrivateKey,
) -> None:
    keys, base = tmp_path / "keys", tmp_path / "base"
    keys.mkdir()
    write_key(keys / "owner.pem", ec.generate_private_key(ec.SECP384R1()))
    write_key(keys / "seedshare.pem", seedshare_key)
    deployment = load_deployment(base, tee_dir, keys, kind)
    before: list[bytes] = []
    if kind.endswith("-update"):
        first = deployment.manifest(first_names(kind))
        result = deployment.coordinator().set_manifest(
            first, deployment.documents(first_names(kind))
        )
        assert result.seed_shares is not None
        write_atomically(keys / SHARES, result.seed_shares.to_json(), mode=0o600)
        before = [first]
    base.mkdir(exist_ok=True)
    untouched = entries(base)

    whole = tmp_path / "whole"
    shutil.copytree(base, whole)
    lines = run_victim(whole, tee_dir, keys, kind, step="none", nth=0)
    points = kill_points(lines)
    # Two batches (packs, index and pointer; the manifest's chunks and index), each synced once.
    assert sum(step == "syncfs" for step, _ in points) == 2, lines
    for step, nth in points:
        state = tmp_path / f"killed-before-{step}-{nth}"
        shutil.copytree(base, state)
        run_victim(state, tee_dir, keys, kind, step=step, nth=nth)
        found = entries(state)
        for key, data in found.items():
            if key.startswith(("packs/", "chunks/")):
                assert digest(data).hex() == key.partition("/")[2], f"{key} is not whole"
        if (step, nth) == ("syncfs", 1):  # nothing is put in place before its data is on disk
            assert found == untouched
        retry_after_death(replace(deployment, state_dir=state), keys, kind, before, committed=False)
