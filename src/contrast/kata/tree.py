"""Reading a release tree without leaving it: every path is walked one component at a time from a
descriptor of the tree's root, as `openat2`'s `RESOLVE_BENEATH` would.

A directory release is whatever the user points at, and an unpacked tarball whatever its members
made, so no path below the root is handed to a call that follows links on its own. Each component
is looked at with `lstat` relative to its parent's descriptor and opened with `O_NOFOLLOW`; a
symlink is followed by this walk only, and only while it stays below the root (an absolute target
or a `..` above the root is refused, naming the link). A file is opened only after `lstat` shows
a regular file (a FIFO would block the build, a device would be read), and the descriptor's own
`fstat` must show the same inode. The build then reads and copies through these descriptors, so
the bytes measured are those of the file that was checked.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from contrast.kata.errors import KataReleaseError

MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ReleaseFile:
    """A regular file of the release, open (`named` is the path asked for, before links)."""

    fd: int
    named: PurePosixPath
    size: int

    @property
    def path(self) -> Path:
        """The open file as a path for tools that take one (sev-snp-measure): the descriptor's
        `/proc/self/fd` entry, which names this inode whatever happens to the tree."""
        return Path(f"/proc/self/fd/{self.fd}")

    def chunks(self) -> Iterator[bytes]:
        offset = 0
        while chunk := os.pread(self.fd, _CHUNK, offset):
            offset += len(chunk)
            yield chunk

    def read(self, limit: int | None = None) -> bytes:
        """The whole file; one of more than `limit` bytes is refused (for text read into memory)."""
        if limit is not None and self.size > limit:
            raise KataReleaseError(
                f"{self.named} is {self.size} bytes, more than the {limit} such a file can be",
                hint="pass the release as published",
            )
        return b"".join(self.chunks())


class ReleaseTree:
    """A directory tree read only below its root; the files it opens close with it."""

    def __init__(self, root_fd: int) -> None:
        self._root = root_fd
        self._open: list[int] = []

    @classmethod
    def open(cls, path: Path) -> ReleaseTree:
        """The tree at `path` (the user's own path, so a link there is followed)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            raise KataReleaseError(
                f"cannot open the Kata release {path}: {error.strerror}"
            ) from None
        return cls(fd)

    @property
    def root_fd(self) -> int:
        return self._root

    def close(self) -> None:
        for fd in [*self._open, self._root]:
            os.close(fd)
        self._open.clear()

    def __enter__(self) -> ReleaseTree:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _walk(self, named: PurePosixPath) -> tuple[int, str, PurePosixPath, os.stat_result] | None:
        """The parent's descriptor (the caller closes it unless it is the root), the last name,
        where the walk ended and its `lstat`; None if something on the way does not exist. Links
        are followed, a last one too, as long as they stay below the root."""
        if named.is_absolute():
            raise KataReleaseError(f"{named} is not a path below the release")
        if "\0" in str(named):
            raise KataReleaseError(f"{str(named)!r} has a NUL in it")
        pending = [part for part in named.parts if part != "."]
        here: list[tuple[int, str]] = []  # the directories walked into: descriptor and name
        link: tuple[PurePosixPath, str] | None = None  # the last link followed and its target
        links = 0
        try:
            while pending:
                part = pending.pop(0)
                if part == "..":
                    if not here:
                        raise self._outside(named, link)
                    os.close(here.pop()[0])
                    continue
                parent = here[-1][0] if here else self._root
                try:
                    status = os.stat(part, dir_fd=parent, follow_symlinks=False)
                except (FileNotFoundError, NotADirectoryError):
                    return None
                if stat.S_ISLNK(status.st_mode):
                    links += 1
                    if links > MAX_LINKS:
                        raise KataReleaseError(f"{named}: more than {MAX_LINKS} links in a row")
                    target = os.readlink(part, dir_fd=parent)
                    link = PurePosixPath(*[name for _, name in here], part), target
                    if target.startswith("/"):
                        raise self._outside(named, link)
                    pending[:0] = [p for p in target.split("/") if p not in ("", ".")]
                    continue
                if not pending:
                    where = PurePosixPath(*[name for _, name in here], part)
                    fd = here.pop()[0] if here else self._root
                    return fd, part, where, status
                if not stat.S_ISDIR(status.st_mode):
                    return None
                here.append((os.open(part, _DIRECTORY_FLAGS, dir_fd=parent), part))
            raise KataReleaseError(f"{named} names the release's root, not a file in it")
        except OSError as error:  # unreadable, swapped for a link while walked, or no descriptors
            raise KataReleaseError(f"cannot read {named}: {error.strerror}") from None
        finally:
            for fd, _ in here:
                os.close(fd)

    def _outside(
        self, named: PurePosixPath, link: tuple[PurePosixPath, str] | None
    ) -> KataReleaseError:
        if link is None:
            return KataReleaseError(f"{named} is not a path below the release")
        at, target = link
        via = "" if at == named else f", on the way to {named}"
        return KataReleaseError(
            f"{at} links outside the release (to {target}){via}",
            hint="a release's links point to files inside it; unpack the release as published",
        )

    def _lookup(self, named: PurePosixPath) -> tuple[PurePosixPath, os.stat_result] | None:
        walked = self._walk(named)
        if walked is None:
            return None
        parent, _, where, status = walked
        if parent != self._root:
            os.close(parent)
        return where, status

    def is_dir(self, named: PurePosixPath) -> bool:
        found = self._lookup(named)
        return found is not None and stat.S_ISDIR(found[1].st_mode)

    def find_file(self, named: PurePosixPath) -> ReleaseFile | None:
        """The regular file at `named`, open; None if it does not exist. Anything else there (a
        directory, a FIFO, a device, a link out of the tree) is an error that names it."""
        walked = self._walk(named)
        if walked is None:
            return None
        parent, name, _, status = walked
        try:
            if not stat.S_ISREG(status.st_mode):
                raise KataReleaseError(
                    f"{named} is not a regular file ({_kind(status.st_mode)})",
                    hint="a release holds its files as regular files",
                )
            fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
        except OSError as error:
            raise KataReleaseError(f"cannot read {named}: {error.strerror}") from None
        finally:
            if parent != self._root:
                os.close(parent)
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (status.st_dev, status.st_ino):
            os.close(fd)
            raise KataReleaseError(f"{named} changed while it was read")
        self._open.append(fd)
        return ReleaseFile(fd, named, opened.st_size)

    def files_below(self, directory: PurePosixPath) -> Iterator[PurePosixPath]:
        """Every non-directory below `directory` (itself resolved), sorted, with directories
        walked as they are (a link to a directory is yielded, and refused by `find_file`)."""
        walked = self._walk(directory)
        if walked is None or not stat.S_ISDIR(walked[3].st_mode):
            return
        parent, name, where, _ = walked
        try:
            fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
        finally:
            if parent != self._root:
                os.close(parent)
        try:
            yield from (where / relative for relative in _entries(fd, PurePosixPath()))
        finally:
            os.close(fd)


def _entries(fd: int, below: PurePosixPath) -> Iterator[PurePosixPath]:
    for name in sorted(os.listdir(fd)):
        status = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(status.st_mode):
            child = os.open(name, _DIRECTORY_FLAGS, dir_fd=fd)
            try:
                yield from _entries(child, below / name)
            finally:
                os.close(child)
        else:
            yield below / name


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a file"
