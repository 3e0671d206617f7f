"""One `syncfs(2)` per file system instead of one `fsync(2)` per file, for writers of many files.

A writer that replaces many files crash-safely must have each new file's data on disk before
the rename that puts it in place. An `fsync` per file waits for one journal commit each (on ext4
1.4 ms here, 1000 of them for `generate` at 1000 workloads: 12 % of its samples); writing every
temporary file first and then syncing their file system once makes the same guarantee with one
commit: `syncfs` returns once every dirty page and inode of that file system is on disk.

Errors: since Linux 5.8 `syncfs` reports a writeback error of the file system that happened
after the descriptor it is given was opened (the superblock's error sequence, sampled at open),
as `fsync` does for its file. So `FileSystems.add` opens a descriptor on each file system
before the first temporary file is written there, and `sync` calls `syncfs` on those. On an older
kernel `syncfs` says nothing of writeback errors; `available()` is False there (and where libc has
no `syncfs`), and callers sync each file instead.

The cost of the one call is what else is dirty on that file system: it writes other programs'
pending data too (the sync the kernel would do within 30 s anyway), where an `fsync` per file
would have committed only the journal (ext4's ordered mode writes the data of files whose blocks
that commit allocates, also other programs').
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

# Since this kernel release `syncfs` returns the writeback errors it finds (commit 735e4ae5ba28,
# "vfs: track per-sb writeback errors and report them to syncfs").
ERRORS_REPORTED_SINCE = (5, 8)
AUDIT_EVENT = "contrast.syncfs"


@functools.cache
def _libc_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def kernel_version(release: str) -> tuple[int, int]:
    """(major, minor) of a Linux release string ("6.8.0-45-generic"); (0, 0) if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", release)
    return (int(match[1]), int(match[2])) if match else (0, 0)


@functools.cache
def available() -> bool:
    """Whether `syncfs` exists here and reports writeback errors (Linux 5.8 or later)."""
    system = os.uname()
    return (
        system.sysname == "Linux"
        and kernel_version(system.release) >= ERRORS_REPORTED_SINCE
        and _libc_syncfs() is not None
    )


class FileSystems:
    """The file systems a writer writes to, each held by a descriptor opened before its first
    write there, to be synced once (`sync`) before the writer's renames. Close when done."""

    def __init__(self) -> None:
        self._descriptors: dict[int, int] = {}  # st_dev → descriptor of a directory on it
        self._directories: set[Path] = set()

    def add(self, directory: Path) -> None:
        """Note `directory`'s file system (call before writing into it). Raises OSError."""
        if directory in self._directories:
            return
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        device = os.fstat(descriptor).st_dev
        if device in self._descriptors:
            os.close(descriptor)
        else:
            self._descriptors[device] = descriptor
        self._directories.add(directory)

    def sync(self) -> None:
        """`syncfs` each file system noted: everything written there is on disk. Raises OSError
        (EIO: some data written there since `add` was lost)."""
        function = _libc_syncfs()
        if function is None:
            raise OSError(0, "syncfs is not available")
        for descriptor in self._descriptors.values():
            # An audit event as `os.fsync` would raise if it had one (ctypes calls raise none
            # here): tests see when the sync happens among the writer's opens and renames.
            sys.audit(AUDIT_EVENT, descriptor)
            if function(descriptor) != 0:
                number = ctypes.get_errno()
                raise OSError(number, os.strerror(number))

    def close(self) -> None:
        descriptors = list(self._descriptors.values())
        self._descriptors.clear()
        for descriptor in descriptors:
            os.close(descriptor)
