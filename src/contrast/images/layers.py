"""`/etc/passwd` and `/etc/group` from image layers, streamed, with both digests checked.

A layer is read once, front to back: the compressed bytes are hashed against the manifest's
descriptor, the uncompressed tar against the config's diff_id, and the two files are picked out
on the way. What a layer does to each file is one of three things (overlayfs semantics, OCI image
spec "Representing Changes"): nothing, write it, or delete it from the layers below
(`.wh.passwd`, an opaque `etc/.wh..wh..opq`, a whiteout of `etc`, or `etc` replaced by a
non-directory). Merging takes the last layer that does something.

Links: a hard link `etc/passwd` to `etc/group` of the same layer gets that content. Any other
link (a symlink, or a hard link to a file not kept) is recorded as an empty file with a warning,
which is what genpolicy reads from such an entry; the policy then knows no named users.
"""

from __future__ import annotations

import logging
import posixpath
import tarfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, cast

from contrast.images.manifest import Descriptor
from contrast.images.model import ImageError
from contrast.images.streams import (
    CHUNK_SIZE,
    DigestingReader,
    ForwardFile,
    GunzipReader,
    Prefetching,
    Readable,
)

LOG = logging.getLogger(__name__)

FILES = ("passwd", "group")
WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
# User databases are small; a bound keeps a hostile layer from filling memory.
MAX_FILE_SIZE = 16 * 1024 * 1024
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class LayerFile:
    """What one layer does to one file of the merged filesystem.

    `content` is the file as the layer writes it (possibly ''); `None` with `deleted` means the
    layer removes the file written by lower layers; `None` without `deleted` means the layer
    leaves it alone.
    """

    content: str | None = None
    deleted: bool = False


@dataclass(frozen=True)
class LayerFacts:
    """What resolution needs from one layer, keyed by its diff_id (also the cache's unit)."""

    diff_id: str
    passwd: LayerFile
    group: LayerFile
    size: int  # uncompressed tar size in bytes


def merge_file(changes: Iterable[LayerFile]) -> str:
    """The file in the merged filesystem, bottom layer first; '' when absent."""
    merged = ""
    for change in changes:
        if change.content is not None:
            merged = change.content
        elif change.deleted:
            merged = ""
    return merged


class _LayerScan:
    """The state of one layer's passwd/group while its tar entries go by."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.content: dict[str, str | None] = dict.fromkeys(FILES)
        self.deleted: dict[str, bool] = dict.fromkeys(FILES, False)

    def entry(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        name = member.name
        if "etc" not in name and WHITEOUT_PREFIX not in name:
            # Nearly every entry: every one that matters names `etc` or is a whiteout, and
            # cleaning the path only drops components, never makes one.
            return
        path = _clean(name)
        if path is None:
            return
        directory, base = posixpath.split(path)
        if path == OPAQUE_MARKER or (path in {".wh.etc", "etc"} and not member.isdir()):
            # The root made opaque, etc whited out or replaced by a non-directory: both files of
            # lower layers are gone. (Whiteouts never hide what their own layer writes.)
            for name in FILES:
                self.deleted[name] = True
            return
        if directory != "etc":
            return
        if base == OPAQUE_MARKER:
            for name in FILES:
                self.deleted[name] = True
            return
        if base.startswith(WHITEOUT_PREFIX) and base[len(WHITEOUT_PREFIX) :] in FILES:
            self.deleted[base[len(WHITEOUT_PREFIX) :]] = True
            return
        if base not in FILES:
            return
        self.content[base] = self._read(tar, member, base)

    def _read(self, tar: tarfile.TarFile, member: tarfile.TarInfo, name: str) -> str | None:
        if member.isreg():
            if member.size > MAX_FILE_SIZE:
                raise ImageError(f"{self.what}: etc/{name} is {member.size} bytes, too large")
            extracted = tar.extractfile(member)
            assert extracted is not None
            return extracted.read().decode("utf-8", errors="replace")
        if member.islnk():
            target = _clean(member.linkname)
            other = next((n for n in FILES if f"etc/{n}" == target and n != name), None)
            if other is not None and self.content[other] is not None:
                return self.content[other]
        if member.isdir():
            # A directory named passwd hides the file below; there is no file any more.
            self.deleted[name] = True
            return None
        LOG.warning(
            "%s: etc/%s is a %s to %r, which is not followed; the image is treated as having"
            " an empty etc/%s",
            self.what,
            name,
            "hard link" if member.islnk() else "symlink" if member.issym() else "special file",
            member.linkname,
            name,
        )
        return ""

    def result(self, name: str) -> LayerFile:
        return LayerFile(content=self.content[name], deleted=self.deleted[name])


def _clean(name: str) -> str | None:
    """A tar entry name relative to the root (`..` stops at the root, as when a runtime unpacks
    a layer into a container's rootfs), or None for the root itself."""
    path = posixpath.normpath("/" + name.lstrip("/"))
    if path == "/":
        return None
    return path.lstrip("/")


def read_layer(
    source: Readable,
    descriptor: Descriptor,
    diff_id: str,
    what: str,
    on_bytes: Callable[[int], None] | None = None,
) -> LayerFacts:
    """Read one layer blob from `source`, checking its digest and diff_id.

    `what` names the layer in messages ("layer 2 of docker.io/library/nginx:latest").
    """
    compressed = DigestingReader(
        source, descriptor.digest, f"{what} ({descriptor.digest})", descriptor.size, on_bytes
    )
    head = compressed.read(CHUNK_SIZE)
    if head.startswith(_ZSTD_MAGIC) or "zstd" in descriptor.media_type:
        raise ImageError(
            f"{what} is zstd-compressed, which is not supported",
            hint="push the image with gzip-compressed layers (the default of docker and buildah)",
        )
    # The passes that need no Python between chunks run ahead in threads of their own: reading
    # and hashing the blob, and inflating it. Both release the GIL for the length of a chunk, so
    # they take the second core while the caller's thread hashes the tar (for the diff_id) and
    # walks its headers. The diff_id's hash stays here, a whole chunk at a time between the
    # walk's steps: in a thread of its own it measured slower, as that thread waits for the GIL,
    # which the walk holds for up to a switch interval (5 ms), after every chunk, while here each
    # chunk's hash releases the GIL for the other two.
    # `stages` lists the threads from the reading end; each reads from the one after it.
    stages = [Prefetching(compressed, name="layer-digest")]
    if head.startswith(_GZIP_MAGIC):
        gunzip = GunzipReader(_Prefixed(head, stages[0]), what)
        stages.insert(0, Prefetching(gunzip, name="layer-gunzip"))
        tar_stream: Readable = stages[0]
    else:
        tar_stream = _Prefixed(head, stages[0])
    uncompressed = DigestingReader(tar_stream, diff_id, f"uncompressed {what} (diff_id)")
    scan = _LayerScan(what)
    try:
        tar_file = ForwardFile(uncompressed, what)
        with tarfile.open(fileobj=cast(IO[bytes], tar_file), mode="r:") as tar:
            # Reading still appends every header to this (undocumented) list; emptying it keeps
            # memory flat in the number of entries, too.
            headers: list[tarfile.TarInfo] = tar.members  # type: ignore[attr-defined]
            while (member := tar.next()) is not None:
                scan.entry(tar, member)
                headers.clear()
        # The rest (the tar's padding, or anything after it) is hashed too, the diff_id checked.
        uncompressed.drain()
    except (tarfile.TarError, zlib.error, ImageError, EOFError, UnicodeError) as error:
        _close(stages)
        # A corrupted blob is reported as such rather than as whatever broke in parsing it.
        compressed.drain()
        if isinstance(error, ImageError):
            raise
        raise ImageError(f"{what} is not a valid tar archive: {error}") from None
    finally:
        _close(stages)
    compressed.drain()
    return LayerFacts(
        diff_id=diff_id,
        passwd=scan.result("passwd"),
        group=scan.result("group"),
        size=uncompressed.size,
    )


def _close(stages: list[Prefetching]) -> None:
    """Stop the threads of a chain of stages, the reading end first.

    Each stage reads from the next one, so stopping them in this order never leaves one waiting
    for a chunk from a stage that has stopped already (and a read from a closed stage raises
    rather than waits, should it happen anyway).
    """
    for stage in stages:
        stage.close()


class _Prefixed:
    """A stream with some already-read bytes put back in front."""

    def __init__(self, head: bytes, rest: Readable) -> None:
        self._head = head
        self._rest = rest

    def read(self, size: int = -1, /) -> bytes:
        if self._head:
            if size is None or size < 0 or size >= len(self._head):
                head, self._head = self._head, b""
                return head
            head, self._head = self._head[:size], self._head[size:]
            return head
        return self._rest.read(size)
