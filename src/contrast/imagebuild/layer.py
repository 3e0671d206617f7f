"""Deterministic layer tars: the same files give the same bytes, whoever builds them and when.

Entries are sorted by path, every directory on the way to a file is written once, times are
SOURCE_DATE_EPOCH, owners are root, and the gzip header carries no name and no time. What still
differs between hosts is the compressor: another zlib version may compress the same tar to other
bytes, which changes the layer's digest but not its diff_id.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

GZIP_LEVEL = 6


@dataclass(frozen=True)
class Entry:
    """One file, directory or symbolic link of a layer, by its path in the image (no leading /)."""

    path: str
    kind: bytes  # tarfile.REGTYPE, DIRTYPE or SYMTYPE
    mode: int
    data: bytes = b""
    target: str = ""

    @classmethod
    def file(cls, path: str, data: bytes, mode: int = 0o644) -> Entry:
        return cls(_clean(path), tarfile.REGTYPE, mode, data=data)

    @classmethod
    def directory(cls, path: str, mode: int = 0o755) -> Entry:
        return cls(_clean(path), tarfile.DIRTYPE, mode)

    @classmethod
    def symlink(cls, path: str, target: str) -> Entry:
        return cls(_clean(path), tarfile.SYMTYPE, 0o777, target=target)


@dataclass(frozen=True)
class Layer:
    """A finished layer: the compressed blob, its digest and the digest of the plain tar."""

    blob: bytes
    digest: str
    diff_id: str

    @property
    def size(self) -> int:
        return len(self.blob)


def _clean(path: str) -> str:
    return str(PurePosixPath("/", path).relative_to("/"))


def write_layer(entries: Iterable[Entry], epoch: int) -> Layer:
    """The layer holding `entries` (the last entry for a path wins), parents added as needed."""
    by_path: dict[str, Entry] = {}
    for entry in entries:
        by_path[entry.path] = entry
    for path in list(by_path):
        for parent in PurePosixPath(path).parents:
            if str(parent) != "." and str(parent) not in by_path:
                by_path[str(parent)] = Entry.directory(str(parent))
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(by_path):
            entry = by_path[path]
            info = tarfile.TarInfo(path)
            info.type = entry.kind
            info.mode = entry.mode
            info.mtime = epoch
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if entry.kind == tarfile.REGTYPE:
                info.size = len(entry.data)
                archive.addfile(info, io.BytesIO(entry.data))
            else:
                info.linkname = entry.target
                archive.addfile(info)
    tar = plain.getvalue()
    compressed = io.BytesIO()
    with gzip.GzipFile(
        filename="", fileobj=compressed, mode="wb", compresslevel=GZIP_LEVEL, mtime=0
    ) as stream:
        stream.write(tar)
    blob = compressed.getvalue()
    return Layer(
        blob=blob,
        digest=f"sha256:{hashlib.sha256(blob).hexdigest()}",
        diff_id=f"sha256:{hashlib.sha256(tar).hexdigest()}",
    )
