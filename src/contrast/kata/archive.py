"""Opening a Kata static release: the tarball as published, or the tree it unpacks to.

The compression is recognised by its magic bytes, not the file name: zstd (releases since 3.21.0),
xz (older ones), gzip or none. Only the members a runtime can use (`layout.is_needed`) are
unpacked, with `tarfile`'s `data` filter, which refuses absolute paths, links out of the tree and
device files; a symlink such as `vmlinuz-confidential.container -> vmlinuz-6.x-confidential` is
kept and followed later, inside the tree only. The unpacked copy lives in a scratch directory
next to the output and is removed when the release is closed.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from contrast.kata import layout
from contrast.kata.errors import KataReleaseError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
XZ_MAGIC = b"\xfd7zXZ\x00"
GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class KataRelease:
    """An opened release: `root` is its `/opt/kata` prefix on this machine."""

    root: Path
    source: str  # the archive's or directory's name, for provenance
    sha256: str | None  # of the archive; None for an unpacked tree
    version: str | None

    def path(self, relative: PurePosixPath) -> Path:
        return self.root / relative

    def resolve(self, absolute: str, what: str) -> tuple[PurePosixPath, Path]:
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
        candidate = self.root / relative
        real = Path(os.path.realpath(candidate))
        if not real.is_relative_to(Path(os.path.realpath(self.root))):
            raise KataReleaseError(f"{what} {absolute} links outside the release")
        if not real.is_file():
            raise KataReleaseError(f"the release has no {what}: {absolute} is missing")
        return relative, real


def _magic(path: Path) -> bytes:
    with path.open("rb") as file:
        return file.read(8)


def _sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


@contextmanager
def _decompressed(path: Path) -> Iterator[IO[bytes]]:
    magic = _magic(path)
    with path.open("rb") as raw:
        if magic.startswith(ZSTD_MAGIC):
            # Imported here: only this path needs it, and every other command starts without it.
            import zstandard  # noqa: PLC0415

            try:
                with zstandard.ZstdDecompressor().stream_reader(raw) as reader:
                    yield reader
            except zstandard.ZstdError as error:
                raise tarfile.ReadError(f"zstd: {error}") from None
        elif magic.startswith(XZ_MAGIC):
            with lzma.open(raw) as reader:
                yield reader
        else:
            yield raw  # gzip and plain tar: tarfile's stream mode recognises both


def _prefix_relative(name: str) -> PurePosixPath | None:
    """A member's path below `opt/kata`, or None if it lies elsewhere."""
    parts = [part for part in PurePosixPath(name).parts if part not in (".", "/")]
    prefix = layout.PREFIX.parts[1:]  # ("opt", "kata")
    if tuple(parts[: len(prefix)]) != prefix:
        return None
    return PurePosixPath(*parts[len(prefix) :]) if len(parts) > len(prefix) else None


def _unpack(path: Path, destination: Path) -> None:
    try:
        with _decompressed(path) as stream, tarfile.open(fileobj=stream, mode="r|*") as archive:
            for member in archive:
                relative = _prefix_relative(member.name)
                if relative is None or not layout.is_needed(relative):
                    continue
                archive.extract(member, destination, filter="data")
    except (tarfile.TarError, lzma.LZMAError, EOFError) as error:
        raise KataReleaseError(
            f"{path} is not a readable Kata release tarball: {error}",
            hint="pass kata-static-<version>-amd64.tar.zst (or .tar.xz) as downloaded,"
            " or the directory it unpacks to",
        ) from None


def _prefix_of(directory: Path) -> Path:
    """`directory/opt/kata`, or `directory` itself if it already is a release prefix."""
    for candidate in (directory / "opt" / "kata", directory):
        if (candidate / layout.CONFIG_DIRECTORY).is_dir():
            return candidate
    raise KataReleaseError(
        f"{directory} holds no Kata release: {layout.PREFIX / layout.CONFIG_DIRECTORY} is missing",
        hint="pass the tarball, or the directory it unpacks to (with opt/kata inside)",
    )


def _version(root: Path) -> str | None:
    try:
        return (root / layout.VERSION_FILE).read_text().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


@contextmanager
def open_release(path: Path, scratch_parent: Path) -> Iterator[KataRelease]:
    """The release at `path` (tarball or directory); a tarball unpacks below `scratch_parent`."""
    if path.is_dir():
        root = _prefix_of(path)
        yield KataRelease(root, path.name, None, _version(root))
        return
    if not path.is_file():
        raise KataReleaseError(f"Kata release {path} does not exist")
    scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".kata-release-", dir=scratch_parent))
    try:
        _unpack(path, scratch)
        root = _prefix_of(scratch)
        yield KataRelease(root, path.name, _sha256(path), _version(root))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
