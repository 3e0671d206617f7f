"""Temporary files a kill -9 leaves in the state directory are removed when the store opens."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from contrast.history.history import ZERO_HASH, History, Transition
from contrast.history.store import FileSystemStore
from tests.conftest import REPO

# Killed between creating its temporary file and renaming it over the entry.
VICTIM = """
import os, sys, time
from pathlib import Path
from contrast import files

def stuck(source, destination):
    print("written", flush=True)
    time.sleep(60)

os.replace = stuck
files.write_atomically(Path(sys.argv[1]), b"new entry" * 1000, mode=0o600)
"""


def killed_while_writing(path: Path) -> None:
    victim = subprocess.Popen(
        [sys.executable, "-c", VICTIM, str(path)], cwd=REPO, stdout=subprocess.PIPE
    )
    assert victim.stdout is not None
    assert victim.stdout.readline() == b"written\n"
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)


def test_orphaned_temporaries_of_a_killed_writer_are_removed_at_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    history = History(FileSystemStore(state))
    key = ec.generate_private_key(ec.SECP384R1())
    transition = history.put_transition(Transition(history.put_manifest(b"{}"), ZERO_HASH))
    history.set_latest(None, transition, key)
    killed_while_writing(state / "manifests" / ("ab" * 32))
    killed_while_writing(state / "transitions" / "latest")
    entries = {path for path in state.rglob("*") if not path.name.startswith(".")}
    orphans = {path for path in state.rglob(".*") if path.name != ".lock"}
    assert len(orphans) == 2, orphans

    reopened = History(FileSystemStore(state))

    assert {path for path in state.rglob(".*") if path.name != ".lock"} == set()
    assert {path for path in state.rglob("*") if not path.name.startswith(".")} == entries
    assert reopened.get_latest(key.public_key()).transition_hash == transition
    assert reopened.manifests(transition) == [b"{}"]


def test_files_that_only_look_similar_are_kept(tmp_path: Path) -> None:
    state = tmp_path / "state"
    FileSystemStore(state).put("manifests/abc", b"x")
    kept = [state / ".lock", state / "manifests" / ".notes", state / "manifests" / "abc"]
    for path in kept:
        path.touch()
    FileSystemStore(state)
    assert all(path.exists() for path in kept)
