"""The guest's initramfs: the Initializer image's root file system, plus what boots it.

The kernel unpacks a `newc` cpio archive into its root file system and runs `/init`. The archive
holds the image's files exactly as its OCI layers have them (read from the layout's blobs, later
layers replacing earlier paths, as a container runtime stacks them), and under `/kvmguest` what
only the guest needs: busybox-static (the image has no shell; `/init` is a busybox script), the
kernel's modules with their modules.dep and load order, and the guest's two scripts. Nothing of
the image is shadowed: `cryptsetup`, `blkid`, `mkfs.ext4`, `mount` and Python are the image's.

Several archives may be concatenated (the kernel unpacks one after another): the cached base and
a small one per boot with that boot's inputs (`extra_archive`).
"""

from __future__ import annotations

import gzip
import io
import json
import stat
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

GUEST_DIR = "kvmguest"
_TRAILER = "TRAILER!!!"


class ImageError(RuntimeError):
    """The image's layers hold something this archive cannot carry."""


class CpioWriter:
    """A `newc` (SVR4 without checksums) archive, as the kernel's initramfs unpacker reads it."""

    def __init__(self, output: BinaryIO) -> None:
        self._output = output
        self._inode = 0

    def _entry(self, name: str, mode: int, data: bytes, *, uid: int = 0, gid: int = 0) -> None:
        self._inode += 1
        encoded = name.encode() + b"\x00"
        fields = (self._inode, mode, uid, gid, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
        header = b"070701" + b"".join(b"%08X" % field for field in fields)
        self._output.write(header + encoded + b"\x00" * (-(len(header) + len(encoded)) % 4))
        self._output.write(data + b"\x00" * (-len(data) % 4))

    def directory(self, name: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        self._entry(name, stat.S_IFDIR | mode, b"", uid=uid, gid=gid)

    def file(self, name: str, data: bytes, mode: int = 0o644, uid: int = 0, gid: int = 0) -> None:
        self._entry(name, stat.S_IFREG | mode, data, uid=uid, gid=gid)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def tree(self, source: Path, name: str) -> None:
        """`source` (a host directory) at `name`, owned by root."""
        self.directory(name)
        for path in sorted(source.rglob("*")):
            inside = f"{name}/{path.relative_to(source).as_posix()}"
            if path.is_symlink():
                self.symlink(inside, str(path.readlink()))
            elif path.is_dir():
                self.directory(inside)
            else:
                self.file(inside, path.read_bytes(), path.stat().st_mode & 0o7777)

    def finish(self) -> None:
        self._entry(_TRAILER, 0, b"")


@dataclass(frozen=True)
class ImageLayers:
    """An image of an OCI layout, by its manifest digest."""

    layout: Path
    digest: str

    def _blob(self, digest: str) -> Path:
        return self.layout / "blobs/sha256" / digest.removeprefix("sha256:")

    def layers(self) -> list[Path]:
        manifest = json.loads(self._blob(self.digest).read_bytes())
        return [self._blob(layer["digest"]) for layer in manifest["layers"]]

    def members(self) -> dict[str, tuple[int, tarfile.TarInfo]]:
        """Every path of the stacked image: the layer it comes from and its header."""
        stacked: dict[str, tuple[int, tarfile.TarInfo]] = {}
        for index, blob in enumerate(self.layers()):
            with tarfile.open(fileobj=gzip.open(blob)) as tar:
                for member in tar:
                    path = PurePosixPath(member.name.removeprefix("./")).as_posix()
                    if PurePosixPath(path).name.startswith(".wh."):
                        raise ImageError(f"{path}: whiteouts are not applied here")
                    if not (member.isdir() or member.isfile() or member.issym()):
                        raise ImageError(f"{path}: {member.type!r} entries are not carried")
                    stacked[path] = (index, member)
        return stacked


def write_image(writer: CpioWriter, image: ImageLayers) -> None:
    """The image's files into `writer`, parents before children."""
    members = image.members()
    wanted: dict[int, set[str]] = {}
    for path, (index, member) in members.items():
        if member.isfile():
            wanted.setdefault(index, set()).add(path)
    contents: dict[str, bytes] = {}
    for index, blob in enumerate(image.layers()):
        with tarfile.open(fileobj=gzip.open(blob)) as tar:
            for member in tar:
                path = PurePosixPath(member.name.removeprefix("./")).as_posix()
                if path in wanted.get(index, ()):
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    contents[path] = extracted.read()
    for path in sorted(members):
        if path == ".":
            continue
        _, member = members[path]
        mode, owner = member.mode & 0o7777, (member.uid, member.gid)
        if member.isdir():
            writer.directory(path, mode, *owner)
        elif member.issym():
            writer.symlink(path, member.linkname)
        else:
            writer.file(path, contents[path], mode, *owner)


def extra_archive(files: Mapping[str, tuple[bytes, int]], directories: Iterator[str]) -> bytes:
    """A small archive of `files` (path -> data, mode) after `directories`, for one boot."""
    buffer = io.BytesIO()
    writer = CpioWriter(buffer)
    for directory in directories:
        writer.directory(directory)
    for path, (data, mode) in files.items():
        writer.file(path, data, mode)
    writer.finish()
    return buffer.getvalue()
