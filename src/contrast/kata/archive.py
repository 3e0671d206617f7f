"""Opening a Kata static release: the tarball as published, or the tree it unpacks to.

A tarball is unpacked by `unpack` (our own member checks and bounds, not tarfile's filter) into a
scratch directory next to the output, removed when the release is closed. Either way the release
is then read through a `ReleaseTree`: every file is opened relative to the release's root without
following a link out of it, so neither a member nor a directory release's symlink can make the
build read or copy a file of the host (a shim `-> /etc/shadow` is refused, not pinned).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from contrast.kata import layout
from contrast.kata.errors import KataReleaseError
from contrast.kata.tree import ReleaseFile, ReleaseTree
from contrast.kata.unpack import Bounds, unpack

_CHUNK = 1 << 20
MAX_VERSION_SIZE = 4096  # `opt/kata/VERSION` is one line


@dataclass(frozen=True)
class KataRelease:
    """An opened release: `prefix` is where its `/opt/kata` lies in `tree`."""

    tree: ReleaseTree
    prefix: PurePosixPath
    source: str  # the archive's or directory's name, for provenance
    sha256: str | None  # of the archive; None for an unpacked tree
    version: str | None

    def find(self, relative: PurePosixPath) -> ReleaseFile | None:
        """The release's regular file at `relative` (below the prefix), open, or None."""
        return self.tree.find_file(self.prefix / relative)

    def is_dir(self, relative: PurePosixPath) -> bool:
        return self.tree.is_dir(self.prefix / relative)

    def files_below(self, relative: PurePosixPath) -> Iterator[PurePosixPath]:
        """Every non-directory below `relative`, relative to the prefix."""
        for path in self.tree.files_below(self.prefix / relative):
            yield path.relative_to(self.prefix)

    def resolve(self, absolute: str, what: str) -> tuple[PurePosixPath, ReleaseFile]:
        """A path the configuration names (`/opt/kata/...`): relative name and the file itself.

        Symlinks are followed, but only within the release.
        """
        named = PurePosixPath(absolute)
        if not named.is_relative_to(layout.PREFIX):
            raise KataReleaseError(
                f"the configuration names {what} {absolute}, outside the release's prefix"
                f" {layout.PREFIX}",
                hint="use the release's own configuration files",
            )
        relative = named.relative_to(layout.PREFIX)
        file = self.find(relative)
        if file is None:
            raise KataReleaseError(f"the release has no {what}: {absolute} is missing")
        return relative, file


def _sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def _prefix_of(tree: ReleaseTree, directory: Path) -> PurePosixPath:
    """`opt/kata`, or `.` if the tree itself is a release prefix."""
    for candidate in (PurePosixPath("opt/kata"), PurePosixPath(".")):
        if tree.is_dir(candidate / layout.CONFIG_DIRECTORY):
            return candidate
    raise KataReleaseError(
        f"{directory} holds no Kata release: {layout.PREFIX / layout.CONFIG_DIRECTORY} is missing",
        hint="pass the tarball, or the directory it unpacks to (with opt/kata inside)",
    )


def _version(tree: ReleaseTree, prefix: PurePosixPath) -> str | None:
    file = tree.find_file(prefix / layout.VERSION_FILE)
    if file is None:
        return None
    try:
        return file.read(limit=MAX_VERSION_SIZE).decode().strip() or None
    except UnicodeDecodeError:
        return None


def _opened(tree: ReleaseTree, path: Path, sha256: str | None) -> KataRelease:
    prefix = _prefix_of(tree, path)
    return KataRelease(tree, prefix, path.name, sha256, _version(tree, prefix))


@contextmanager
def open_release(
    path: Path, scratch_parent: Path, bounds: Bounds | None = None
) -> Iterator[KataRelease]:
    """The release at `path` (tarball or directory); a tarball unpacks below `scratch_parent`
    within `bounds` (by default `Bounds()`). Its files stay open until the release is closed."""
    if path.is_dir():
        with ReleaseTree.open(path) as tree:
            yield _opened(tree, path, None)
        return
    if not path.is_file():
        raise KataReleaseError(f"Kata release {path} does not exist")
    scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".kata-release-", dir=scratch_parent))
    try:
        with ReleaseTree.open(scratch) as tree:
            unpack(path, tree.root_fd, bounds or Bounds())
            yield _opened(tree, path, _sha256(path))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
