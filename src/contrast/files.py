"""Files that must survive a crash: written atomically, keys and secrets owner-only."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from contrast import syncfs
from contrast.boundedfile import read_bounded

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

TEMPORARY_SUFFIX = ".tmp"
# `.<name>.<8 random characters of mkstemp>[.tmp]`: the suffix-less form is what versions before
# the suffix left behind.
_TEMPORARY = re.compile(r"\..+\.[a-z0-9_]{8}(?:\.tmp)?")


def write_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.

    The temporary file is created with `mode` from the start, so a key is never readable by
    others, not even for a moment.
    """
    staged = stage(path, data, mode=mode)
    staged.commit()
    sync_directory(path.parent)


def write_all_atomically(files: Sequence[tuple[Path, bytes]], *, mode: int = 0o644) -> None:
    """`write_atomically` of each file, with one sync for all of them.

    Every file's data is written to its temporary file unsynced, their file systems are synced
    once (`contrast.syncfs`, a descriptor on each opened before the first write there, so that a
    writeback error is reported), and only then are the files renamed into place, in order, and
    each directory synced once. So a crash at any point leaves each file old or new, and no new
    file before every new file's data is on disk; when this returns, all are durable. Where
    `syncfs` cannot report errors (Linux before 5.8) each file is synced as it is staged.
    """
    file_systems = syncfs.FileSystems() if syncfs.available() else None
    directories = list(dict.fromkeys(path.parent for path, _ in files))
    staged: list[StagedFile] = []
    committed = 0
    try:
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)
            if file_systems is not None:
                file_systems.add(directory)  # before the first write there (syncfs's docstring)
        for path, data in files:
            staged.append(stage(path, data, mode=mode, sync=file_systems is None))
        if file_systems is not None:
            file_systems.sync()
        for file in staged:
            file.commit()
            committed += 1
        for directory in directories:
            sync_directory(directory)
    finally:
        for file in staged[committed:]:
            file.discard()
        if file_systems is not None:
            file_systems.close()


@dataclass(frozen=True)
class StagedFile:
    """Data written and synced next to `path` (the first half of `write_atomically`).

    `commit()` puts it in place (then `sync_directory` makes the rename durable), `discard()`
    removes it: a caller that writes many files can write them while it still works, and put
    them in place only when nothing can fail any more.
    """

    path: Path
    temporary: Path

    def commit(self) -> None:
        try:
            os.replace(self.temporary, self.path)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        self.temporary.unlink(missing_ok=True)


def stage(path: Path, data: bytes, *, mode: int = 0o644, sync: bool = True) -> StagedFile:
    """`data` in a temporary file beside `path`, created with `mode`, written and synced.

    `sync` False leaves the syncing to the caller, who must have the data on disk before the
    commit (`contrast.syncfs`: one `syncfs` for many staged files).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX
    )
    try:
        os.fchmod(descriptor, mode)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            if sync:
                os.fsync(file.fileno())
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return StagedFile(path, Path(temporary))


def sync_directory(directory: Path) -> None:
    """Make the renames in `directory` durable."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_directory(staging: Path, final: Path) -> None:
    """Rename the finished `staging` tree to `final`, replacing an existing `final` whole.

    The old tree is first renamed aside (into a fresh directory beside `final`), so at every
    moment `final` is either the old tree or the new one, never a mix; the old one is removed
    last.
    """
    if final.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
        os.replace(final, trash / final.name)
        os.replace(staging, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(staging, final)


def remove_orphaned_temporaries(directory: Path) -> list[Path]:
    """Delete the temporary files of `write_atomically` that a killed writer left in `directory`.

    A kill -9 between creating the temporary file and renaming it leaves the file forever; the
    state it was meant to replace is intact. Only call this while no other process writes into
    `directory` (the history store holds its lock exclusively). Not recursive.
    """
    removed = []
    # scandir and the name first: a history directory holds an entry per update, and this runs
    # on every start (pathlib's iterdir and a stat per entry cost 10x as much at 1000 updates).
    try:
        with os.scandir(directory) as entries:
            candidates = [
                entry.name
                for entry in entries
                if _TEMPORARY.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)
            ]
    except FileNotFoundError:
        return []
    for name in candidates:
        path = directory / name
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on the file `path` and remove the file when done.

    The lock file exists only while a process holds or awaits it, so a workspace keeps no
    `.lock` leftovers. Removing it is safe because the holder unlinks it before unlocking, and a
    waiter that then gets the lock checks that `path` still names the file it locked; if not
    (gone, or created anew by a later process), it starts over on the current file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            locked = os.fstat(descriptor)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
        except BaseException:
            os.close(descriptor)
            raise
        if current is not None and (current.st_dev, current.st_ino) == (
            locked.st_dev,
            locked.st_ino,
        ):
            break
        os.close(descriptor)  # the file we locked was removed: not the lock any more
    try:
        yield
    finally:
        try:
            path.unlink(missing_ok=True)
        finally:
            os.close(descriptor)


def write_private_key(path: Path, key: PrivateKeyTypes) -> None:
    """Store a private key as unencrypted PKCS#8 PEM, readable by the owner only."""
    # Imported here: the emulated runtime's runc path locks and writes files with no key in sight.
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_atomically(path, pem, mode=0o600)


def read_private_key(path: Path) -> PrivateKeyTypes:
    """Load a key written by `write_private_key` (a PEM key of a few KiB: 64 KiB at most)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    data = read_bounded(path, 64 << 10, what="the private key")
    return serialization.load_pem_private_key(data, password=None)
