"""Unpacking a Kata release tarball by our own rules, not the interpreter's tar filter.

tarfile's `data` filter judged links with `os.path.realpath`, which before CPython 3.11.13 stops
expanding a path longer than PATH_MAX: a chain of symlinked directories then wrote files anywhere
(CVE-2025-4517). Here tarfile only parses; every member is checked against what a Kata release
holds and created relative to a directory descriptor without following links:

- names are relative and have no `..`; only members below `opt/kata` that a runtime can use
  (`layout.is_needed`) are unpacked, the rest is read past;
- a needed member is a directory, a regular file, or a symlink to a name beside it (the release's
  `vmlinuz-confidential.container -> vmlinuz-6.x-confidential`, `configuration.toml ->
  configuration-qemu.toml`, see `layout.is_sibling_link`); hard links, devices, FIFOs and sparse
  files are refused;
- each directory on a member's path is opened with `O_NOFOLLOW` from its parent's descriptor, so
  no member is created through a link, and a file is created with `O_EXCL`, so none is written
  twice or over a link.

The archive is read as a stream, one member at a time: tarfile's list of members is cleared after
each (it keeps every header otherwise, 1.9 GB for 4 M empty members), and `Bounds` caps what a
tarball can cost before anything is written (see its fields for the numbers and why).
"""

from __future__ import annotations

import _compression
import io
import lzma
import os
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from contrast.kata import layout
from contrast.kata.errors import KataReleaseError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
XZ_MAGIC = b"\xfd7zXZ\x00"
_CHUNK = 1 << 20
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_EXTENDED_TYPES = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
_REGULAR_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_KINDS = {
    tarfile.LNKTYPE: "hard link",
    tarfile.CHRTYPE: "character device",
    tarfile.BLKTYPE: "block device",
    tarfile.FIFOTYPE: "FIFO",
    tarfile.GNUTYPE_SPARSE: "sparse file",
}
GIB = 1 << 30
MIB = 1 << 20
_HINT = (
    "a Kata release as published has no such member: download"
    " kata-static-<version>-<arch>.tar.zst again from the Kata Containers releases and check its"
    " sha256, or pass the directory it unpacks to"
)

_BOUNDS_HINT = (
    "a Kata release as published stays far below this bound (see the README on runtime build):"
    " download kata-static-<version>-<arch>.tar.zst again and check its sha256"
)


@dataclass(frozen=True)
class Bounds:
    """What one tarball may cost. A real kata-static-3.x-amd64 release has a few thousand
    members; its largest files are the guest images (hundreds of MB, the NVIDIA ones more); it
    is up to 1.6 GB compressed (kata-containers CI, 2026) and compresses 3 to 5 times. The
    defaults are an order of magnitude above that, and far below what fills a disk or memory."""

    members: int = 100_000  # headers read, skipped members included
    file_size: int = 4 * GIB  # one member's data
    total_size: int = 32 * GIB  # all members' data and extended headers, skipped ones included
    ratio: int = 100  # ... and at most `ratio` times the compressed file, plus `ratio_slack`
    ratio_slack: int = 64 * MIB
    header_size: int = MIB  # one pax or GNU long-name header, which tarfile reads whole
    header_chain: int = 8  # extended headers in a row before a member (tarfile recurses on each)
    # The decompressor's window: zstd's own default limit, twice what `xz -9` needs (65 MiB).
    decompressor_memory: int = 128 * MIB


class _Budget:
    """Counts what the archive has cost so far and refuses the first member over a bound."""

    def __init__(self, bounds: Bounds, archive: Path, compressed: int) -> None:
        self.bounds = bounds
        self.archive = archive
        self.compressed = compressed
        self.members = 0
        self.total = 0
        self.chain = 0

    def _refuse(self, message: str) -> KataReleaseError:
        return KataReleaseError(f"{self.archive}: {message}", hint=_BOUNDS_HINT)

    def _add(self, size: int, name: str) -> None:
        self.total += size
        bounds = self.bounds
        if self.total > bounds.total_size:
            raise self._refuse(
                f"the release unpacks to more than {bounds.total_size} bytes in all (at {name})"
            )
        if self.total > bounds.ratio * self.compressed + bounds.ratio_slack:
            raise self._refuse(
                f"{name} brings the release to {self.total} bytes, more than {bounds.ratio} times"
                f" its {self.compressed} compressed bytes: a decompression bomb"
            )

    def header(self, info: tarfile.TarInfo) -> None:
        """Every header block tarfile parses, before it reads an extended header's data."""
        if info.type not in _EXTENDED_TYPES:
            self.chain = 0
            return
        self.chain += 1
        if self.chain > self.bounds.header_chain:
            raise self._refuse(f"more than {self.bounds.header_chain} extended headers in a row")
        if info.size > self.bounds.header_size:
            raise self._refuse(
                f"an extended header of {info.size} bytes (at most {self.bounds.header_size})"
            )
        self._add(info.size, "an extended header")

    def member(self, info: tarfile.TarInfo) -> None:
        self.members += 1
        if self.members > self.bounds.members:
            raise self._refuse(f"more than {self.bounds.members} members")
        if info.size > self.bounds.file_size:
            raise self._refuse(
                f"{info.name} is {info.size} bytes, more than the {self.bounds.file_size} bytes"
                " a release file can be"
            )
        self._add(info.size, info.name)


def _tarinfo_counted_by(budget: _Budget) -> type[tarfile.TarInfo]:
    class CountedTarInfo(tarfile.TarInfo):
        @classmethod
        def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> CountedTarInfo:
            info = super().frombuf(buf, encoding, errors)
            budget.header(info)
            return info

    return CountedTarInfo


def _magic(path: Path) -> bytes:
    with path.open("rb") as file:
        return file.read(8)


@contextmanager
def _decompressed(path: Path, memory: int) -> Iterator[IO[bytes]]:
    """The tar stream in `path`, by the compression its magic bytes name (zstd since Kata 3.21,
    xz before; gzip and plain tar are recognised by tarfile's stream mode), decompressed in at
    most `memory` bytes of window (a header can ask for 1.5 GiB)."""
    magic = _magic(path)
    with path.open("rb") as raw:
        if magic.startswith(ZSTD_MAGIC):
            # Imported here: only this path needs it, and every other command starts without it.
            import zstandard  # noqa: PLC0415

            try:
                decompressor = zstandard.ZstdDecompressor(max_window_size=memory)
                with decompressor.stream_reader(raw) as reader:
                    yield reader
            except zstandard.ZstdError as error:
                raise tarfile.ReadError(f"zstd: {error}") from None
        elif magic.startswith(XZ_MAGIC):
            # lzma.open takes no memory limit; this is the reader it builds, with one.
            xz = _compression.DecompressReader(
                raw, lzma.LZMADecompressor, trailing_error=lzma.LZMAError, memlimit=memory
            )
            with io.BufferedReader(xz) as reader:
                yield reader
        else:
            yield raw


def _parts(name: str) -> list[str]:
    """A member's name as components, or an error for a name no release has."""
    if name.startswith("/"):
        raise KataReleaseError(f"the release's member {name} has an absolute name", hint=_HINT)
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise KataReleaseError(
            f"the release's member {name} is not below its root (..)", hint=_HINT
        )
    if any("\0" in part for part in parts):
        raise KataReleaseError(f"the release's member {name!r} has a NUL in its name", hint=_HINT)
    return parts


def _needed(parts: list[str]) -> bool:
    prefix = layout.PREFIX.parts[1:]  # ("opt", "kata")
    if len(parts) <= len(prefix) or tuple(parts[: len(prefix)]) != prefix:
        return False
    return layout.is_needed("/".join(parts[len(prefix) :]))


class _Writer:
    """Creates members below a directory descriptor, never through a link."""

    def __init__(self, root_fd: int) -> None:
        self.root = root_fd

    def _directory(self, parts: list[str], name: str) -> int:
        """The directory `parts` (made where missing) open; the caller closes it."""
        fd = os.dup(self.root)
        for index, part in enumerate(parts):
            try:
                with suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                child = os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
            except OSError:
                os.close(fd)
                path = "/".join(parts[: index + 1])
                raise KataReleaseError(
                    f"the release's member {name} lies below {path}, which is not a directory"
                    " (members are unpacked without following links)",
                    hint=_HINT,
                ) from None
            os.close(fd)
            fd = child
        return fd

    def _twice(self, name: str) -> KataReleaseError:
        return KataReleaseError(f"the release's member {name} appears twice", hint=_HINT)

    def directory(self, parts: list[str], name: str) -> None:
        os.close(self._directory(parts, name))

    def symlink(self, parts: list[str], target: str, name: str) -> None:
        parent = self._directory(parts[:-1], name)
        try:
            os.symlink(target, parts[-1], dir_fd=parent)
        except FileExistsError:
            raise self._twice(name) from None
        finally:
            os.close(parent)

    def file(self, parts: list[str], data: IO[bytes], size: int, name: str) -> None:
        parent = self._directory(parts[:-1], name)
        try:
            fd = os.open(parts[-1], _NEW_FILE_FLAGS, 0o600, dir_fd=parent)
        except FileExistsError:
            raise self._twice(name) from None
        finally:
            os.close(parent)
        with os.fdopen(fd, "wb") as out:
            written = 0
            while chunk := data.read(min(_CHUNK, size - written)):
                written += len(chunk)
                out.write(chunk)
            if written != size:
                raise tarfile.ReadError(f"unexpected end of data in {name}")


def _unpack_member(archive: tarfile.TarFile, member: tarfile.TarInfo, writer: _Writer) -> None:
    name = member.name
    parts = _parts(name)
    if not _needed(parts):
        return
    if member.type == tarfile.DIRTYPE:
        writer.directory(parts, name)
    elif member.type in _REGULAR_TYPES and member.sparse is None:
        data = archive.extractfile(member)
        assert data is not None  # a regular file's
        writer.file(parts, data, member.size, name)
    elif member.type == tarfile.SYMTYPE:
        if not layout.is_sibling_link(member.linkname):
            raise KataReleaseError(
                f"the release's member {name} is a symlink to {member.linkname}: a release"
                " links only to a name beside the link",
                hint=_HINT,
            )
        writer.symlink(parts, member.linkname, name)
    else:
        kind = _KINDS.get(member.type, f"member of type {member.type!r}")
        if member.sparse is not None:
            kind = "sparse file"
        raise KataReleaseError(
            f"the release's member {name} is a {kind}: a release holds only directories, files"
            " and links to files beside them",
            hint=_HINT,
        )


def unpack(path: Path, destination_fd: int, bounds: Bounds) -> None:
    """Unpack the members of the tarball at `path` a runtime can use below `destination_fd`."""
    budget = _Budget(bounds, path, path.stat().st_size)
    writer = _Writer(destination_fd)
    try:
        with (
            _decompressed(path, bounds.decompressor_memory) as stream,
            tarfile.open(
                fileobj=stream, mode="r|*", tarinfo=_tarinfo_counted_by(budget)
            ) as archive,
        ):
            while (member := archive.next()) is not None:
                # tarfile appends every header it reads to `members` (not in its stubs).
                archive.members.clear()  # type: ignore[attr-defined]
                budget.member(member)
                _unpack_member(archive, member, writer)
    except (tarfile.TarError, lzma.LZMAError, EOFError) as error:
        raise KataReleaseError(
            f"{path} is not a readable Kata release tarball: {error}",
            hint="pass kata-static-<version>-amd64.tar.zst (or .tar.xz) as downloaded,"
            " or the directory it unpacks to",
        ) from None
    except OSError as error:  # the archive unreadable, or the scratch directory's disk full
        raise KataReleaseError(f"cannot unpack {path}: {error.strerror}") from None
