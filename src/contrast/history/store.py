"""Key-value backends for the history.

The history needs three things from storage: put an immutable entry, read an entry, and replace
the head only if it still has the value the writer last saw. The file-system backend does that on
any POSIX file system (a Kubernetes persistent volume included): each write goes to a temporary
file, is fsynced and renamed over the old one; the compare-and-swap holds an `flock` on a lock file
so two Coordinator processes on one volume cannot interleave. A batch of entries (`put_many`: a
manifest's policy packs, a chunked manifest) is synced once, not once per file.
"""

from __future__ import annotations

import fcntl
import logging
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from contrast.files import remove_orphaned_temporaries, write_all_atomically, write_atomically
from contrast.history.errors import ConcurrentUpdate, HistoryError

log = logging.getLogger(__name__)

# As the original's ConfigMap store: "<kind>/<name>", so keys map to file and object names.
KEY_PATTERN = re.compile(r"^[a-zA-Z0-9-]+/[a-zA-Z0-9-]+$")
KIND_PATTERN = re.compile(r"^[a-zA-Z0-9-]+$")


class Store(Protocol):
    def get(self, key: str) -> bytes | None:
        """The value at `key`, or None when there is none."""

    def put(self, key: str, value: bytes) -> None:
        """Write `value` at `key` durably (content-addressed entries never change)."""

    def put_many(self, entries: Mapping[str, bytes]) -> None:
        """`put` each entry, in order, durably by the time this returns.

        A backend may make them durable together, but never puts an entry in place before the
        data of every entry of the batch is durable: a crash leaves some of them written, each
        whole, and the ones written readable, as a crash between `put`s would.
        """

    def compare_and_swap(self, key: str, expected: bytes | None, value: bytes) -> None:
        """Write `value` at `key` only if it currently holds `expected` (None: absent).

        The loser of a race gets `ConcurrentUpdate`, and nothing it sent is written.
        """

    def names(self, kind: str) -> list[str]:
        """The names of every entry of `kind` (`manifests`, `policies`, ...), sorted."""

    def describe(self, key: str) -> str:
        """Where `key` is kept, for messages that must name a damaged entry (a file, an object)."""


def check_key(key: str) -> None:
    if not KEY_PATTERN.fullmatch(key):
        raise HistoryError(f"invalid history key {key!r}: expected <kind>/<name> in [a-zA-Z0-9-]")


def check_kind(kind: str) -> None:
    if not KIND_PATTERN.fullmatch(kind):
        raise HistoryError(f"invalid history kind {kind!r}: expected [a-zA-Z0-9-]")


class FileSystemStore:
    """A store in a directory: one file per key, at `<root>/<kind>/<name>`.

    Writers hold the lock file shared, the compare-and-swap and the start-up clean-up hold it
    exclusively: so opening a store removes the temporary files of writers killed earlier, and
    never one that a live writer in another process is about to rename.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._root = str(root)
        self._remove_orphans()

    def _remove_orphans(self) -> None:
        if not self.root.is_dir():
            return
        try:
            with self._locked():
                directories = [self.root, *(p for p in self.root.iterdir() if p.is_dir())]
                removed = [path for d in directories for path in remove_orphaned_temporaries(d)]
        except OSError as error:
            raise HistoryError(f"cannot clean up {self.root}: {error.strerror}") from None
        if removed:
            log.info(
                "removed %d temporary files left by an interrupted write from %s",
                len(removed),
                self.root,
            )

    def _path(self, key: str) -> Path:
        check_key(key)
        return self.root / key

    def describe(self, key: str) -> str:
        return str(self._path(key))

    def get(self, key: str) -> bytes | None:
        # The plain `open` of a string path: pathlib's joining and opening cost as much again as
        # the read, and the Coordinator reads the head before every certificate.
        check_key(key)
        try:
            with open(f"{self._root}/{key}", "rb") as file:
                return file.read()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise HistoryError(f"cannot read {key} from {self.root}: {error.strerror}") from None

    def put(self, key: str, value: bytes) -> None:
        path = self._path(key)
        try:
            with self._locked(shared=True):
                write_atomically(path, value, mode=0o600)
        except OSError as error:
            raise HistoryError(f"cannot write {key} to {self.root}: {error.strerror}") from None

    def put_many(self, entries: Mapping[str, bytes]) -> None:
        """Every entry's data on disk with one `syncfs` before the first rename, then the
        renames in order and one fsync per directory (`write_all_atomically`): a manifest's 540
        packs at 10 000 real-size workloads were 540 fsyncs and 540 directory fsyncs."""
        files = [(self._path(key), value) for key, value in entries.items()]
        try:
            with self._locked(shared=True):
                write_all_atomically(files, mode=0o600)
        except OSError as error:
            raise HistoryError(
                f"cannot write {len(files)} entries to {self.root}: {error.strerror}"
            ) from None

    def compare_and_swap(self, key: str, expected: bytes | None, value: bytes) -> None:
        path = self._path(key)
        try:
            with self._locked():
                current = self.get(key)
                if current != expected:
                    raise ConcurrentUpdate(
                        f"{key} changed while it was being updated",
                        hint="another Coordinator shares this state; retry",
                    )
                write_atomically(path, value, mode=0o600)
        except OSError as error:
            raise HistoryError(f"cannot write {key} to {self.root}: {error.strerror}") from None

    def names(self, kind: str) -> list[str]:
        check_kind(kind)
        try:
            entries = list((self.root / kind).iterdir())
        except FileNotFoundError:
            return []
        except OSError as error:
            raise HistoryError(f"cannot list {kind} in {self.root}: {error.strerror}") from None
        # Temporary files of writes in progress start with a dot and are no entries yet.
        return sorted(p.name for p in entries if KEY_PATTERN.fullmatch(f"{kind}/{p.name}"))

    @contextmanager
    def _locked(self, *, shared: bool = False) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


class MemoryStore:
    """A store in a dict: for tests and for the CLI's offline checks of a `verify/` history."""

    def __init__(self) -> None:
        self.entries: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        check_key(key)
        return self.entries.get(key)

    def put(self, key: str, value: bytes) -> None:
        check_key(key)
        self.entries[key] = value

    def put_many(self, entries: Mapping[str, bytes]) -> None:
        for key, value in entries.items():
            self.put(key, value)

    def describe(self, key: str) -> str:
        check_key(key)
        return key

    def names(self, kind: str) -> list[str]:
        check_kind(kind)
        return sorted(k.partition("/")[2] for k in self.entries if k.startswith(f"{kind}/"))

    def compare_and_swap(self, key: str, expected: bytes | None, value: bytes) -> None:
        check_key(key)
        with self._lock:
            if self.entries.get(key) != expected:
                raise ConcurrentUpdate(f"{key} changed while it was being updated")
            self.entries[key] = value
