"""Deterministic layer tars: the same files give the same bytes, whoever builds them and when.

Entries are sorted by path, every directory on the way to a file is written once, times are
SOURCE_DATE_EPOCH, owners are root, and the gzip header carries no name and no time. What still
differs between hosts is the compressor: another zlib version may compress the same tar to other
bytes, which changes the layer's digest but not its diff_id.

A layer is written as a stream, tar into gzip into the output file, hashing the tar (diff_id) and
the gzip (digest) on the way, and a file named by its path (`Entry.from_file`) is read in chunks:
the memory a layer takes does not grow with its size (a Kata payload is a gigabyte and more).
The bytes are those of building the whole tar and then its gzip in memory (tests/imagebuild).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from contrast.imagebuild.lock import BuildError

GZIP_LEVEL = 6
CHUNK = 1 << 20  # what tarfile copies a file by; each chunk is hashed and compressed in turn


@dataclass(frozen=True)
class Entry:
    """One file, directory or symbolic link of a layer, by its path in the image (no leading /).

    A file's content is `data`, or the file at `source` when it is read only as the layer is
    written.
    """

    path: str
    kind: bytes  # tarfile.REGTYPE, DIRTYPE or SYMTYPE
    mode: int
    data: bytes = b""
    target: str = ""
    source: Path | None = None

    @classmethod
    def file(cls, path: str, data: bytes, mode: int = 0o644) -> Entry:
        return cls(_clean(path), tarfile.REGTYPE, mode, data=data)

    @classmethod
    def from_file(cls, path: str, source: Path, mode: int = 0o644) -> Entry:
        """The file at `source` (followed if a link), read in chunks when the layer is written."""
        return cls(_clean(path), tarfile.REGTYPE, mode, source=source)

    @classmethod
    def directory(cls, path: str, mode: int = 0o755) -> Entry:
        return cls(_clean(path), tarfile.DIRTYPE, mode)

    @classmethod
    def symlink(cls, path: str, target: str) -> Entry:
        return cls(_clean(path), tarfile.SYMTYPE, 0o777, target=target)


@dataclass(frozen=True)
class Layer:
    """A written layer: the digest and size of its blob, and the digest of the plain tar.

    `path` is the file holding the blob (`LayoutWriter.layer` sets it), for a layout that copies
    it; None for a blob written elsewhere. Where it lies is not part of what the layer is.
    """

    digest: str
    diff_id: str
    size: int
    path: Path | None = field(default=None, compare=False)


def _clean(path: str) -> str:
    return str(PurePosixPath("/", path).relative_to("/"))


class _Hashing:
    """A write-only stream that hashes and counts what passes on to `out` (tarfile asks tell)."""

    def __init__(self, out: BinaryIO | gzip.GzipFile) -> None:
        self.out = out
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        self.out.write(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        """Nothing: the owner of `out` flushes it (a gzip flush mid-stream would change bytes)."""

    @property
    def digest(self) -> str:
        return f"sha256:{self.hash.hexdigest()}"


class _Exact:
    """`size` bytes of `file` for tarfile, or a BuildError if the file is shorter now."""

    def __init__(self, file: BinaryIO, size: int, source: Path) -> None:
        self.file = file
        self.left = size
        self.source = source

    def read(self, count: int = -1, /) -> bytes:
        wanted = self.left if count < 0 else min(count, self.left)
        data = self.file.read(wanted)
        if len(data) < wanted:
            raise BuildError(f"{self.source} became shorter while it was written into a layer")
        self.left -= len(data)
        return data


def write_layer(entries: Iterable[Entry], epoch: int, output: BinaryIO) -> Layer:
    """Write the layer holding `entries` to `output` (the last entry for a path wins).

    Parents are added as needed. `output` gets the gzip blob, written in pieces as it is made.
    """
    by_path: dict[str, Entry] = {}
    for entry in entries:
        by_path[entry.path] = entry
    for path in list(by_path):
        for parent in PurePosixPath(path).parents:
            if str(parent) != "." and str(parent) not in by_path:
                by_path[str(parent)] = Entry.directory(str(parent))
    blob = _Hashing(output)
    # No name and mtime 0 in the gzip header. Deflate's output does not depend on how its input
    # is cut, so compressing the tar piece by piece gives the bytes of compressing it whole.
    with gzip.GzipFile(
        filename="", fileobj=blob, mode="wb", compresslevel=GZIP_LEVEL, mtime=0
    ) as compressed:
        tar = _Hashing(compressed)
        # In mode "w" tarfile only writes and tells; typeshed's protocol asks read and seek too.
        with tarfile.TarFile(
            fileobj=tar,  # type: ignore[arg-type]
            mode="w",
            format=tarfile.PAX_FORMAT,
            copybufsize=CHUNK,
        ) as archive:
            for path in sorted(by_path):
                _add(archive, by_path[path], epoch)
    return Layer(digest=blob.digest, diff_id=tar.digest, size=blob.size)


def _add(archive: tarfile.TarFile, entry: Entry, epoch: int) -> None:
    info = tarfile.TarInfo(entry.path)
    info.type = entry.kind
    info.mode = entry.mode
    info.mtime = epoch
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if entry.kind != tarfile.REGTYPE:
        info.linkname = entry.target
        archive.addfile(info)
    elif entry.source is None:
        info.size = len(entry.data)
        archive.addfile(info, io.BytesIO(entry.data))
    else:
        with entry.source.open("rb") as file:
            # The size as the file is opened; a file that changes while it is copied is refused.
            info.size = os.fstat(file.fileno()).st_size
            archive.addfile(info, _Exact(file, info.size, entry.source))
            if file.read(1):
                raise BuildError(f"{entry.source} grew while it was written into a layer")
