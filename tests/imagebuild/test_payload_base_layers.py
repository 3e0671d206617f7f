"""The payload image takes the base image's layers as `read_base` checked them, reading each once.

`read_base` hashes every base layer blob (so a bad one is refused before anything is written);
`write_payload_image` then links that very file into the new layout instead of reading it again.
A file that is not the one hashed (replaced, written since) or that cannot be linked (another
file system) is copied and hashed again on the way: changed, it is refused and nothing is left.
The bytes read are the kernel's count for this thread (`rchar` in /proc/thread-self/io: every
read, pread, sendfile and copy_file_range), so a copy of any kind counts.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from contrast.imagebuild import payloadimage
from contrast.imagebuild.layer import Entry
from contrast.imagebuild.oci import LayoutWriter
from contrast.imagebuild.spec import IMAGES

LAYER_SIZE = 16 << 20
REPOSITORY = "registry.example.com/n"


def read_so_far() -> int:
    """Bytes this thread has read from files (and pipes) since it started."""
    try:
        text = Path("/proc/thread-self/io").read_text()
    except OSError as error:
        pytest.fail(f"/proc/thread-self/io cannot be read ({error}): the test counts reads by it")
    return int(next(x for x in text.splitlines() if x.startswith("rchar:")).split()[1])


def base_layout(path: Path) -> Path:
    """A node-installer image of two layers, the first 16 MiB that gzip cannot shrink."""
    writer = LayoutWriter(path)
    spec = next(spec for spec in IMAGES if spec.name == "node-installer")
    big = writer.layer([Entry.file("usr/lib/big", os.urandom(LAYER_SIZE))], 1)
    small = writer.layer([Entry.file("usr/bin/contrast", b"#!/bin/false\n", 0o755)], 1)
    writer.image(spec, [big, small], epoch=1)
    writer.finish()
    return path


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    path = tmp_path / "payload"
    path.mkdir()
    (path / "runtime.json").write_bytes(b"{}\n")
    return path


def blob_path(layout: Path, digest: str) -> Path:
    return layout / "blobs/sha256" / digest.removeprefix("sha256:")


def layout_files(layout: Path) -> dict[str, bytes]:
    return {str(p.relative_to(layout)): p.read_bytes() for p in layout.rglob("*") if p.is_file()}


def test_each_base_layer_is_read_once_and_the_new_layout_holds_that_file(
    tmp_path: Path, payload: Path
) -> None:
    base_path = base_layout(tmp_path / "base")
    before = read_so_far()
    base = payloadimage.read_base(base_path)
    checking = read_so_far() - before
    before = read_so_far()
    image = payloadimage.write_payload_image(
        base, payload, "handler", tmp_path / "out", repository=REPOSITORY
    )
    writing = read_so_far() - before
    # The check reads every layer once; writing reads the payload and its own new blobs, not the
    # 16 MiB layer again (a copy after the check read 16 MiB more here).
    assert LAYER_SIZE <= checking < 2 * LAYER_SIZE, checking
    assert writing < LAYER_SIZE // 4, writing
    for checked in base.layers:
        source = blob_path(base_path, checked.descriptor.digest)
        written = blob_path(image.layout, checked.descriptor.digest)
        assert written.stat().st_ino == source.stat().st_ino  # the file that was hashed
        assert written.read_bytes() == source.read_bytes()


def test_the_layout_is_the_same_bytes_linked_or_copied_across_file_systems(
    tmp_path: Path, payload: Path
) -> None:
    """From /dev/shm (tmpfs) no link can be made: the copy gives the same layout, blob for blob."""
    base_path = base_layout(tmp_path / "base")
    linked = payloadimage.write_payload_image(
        payloadimage.read_base(base_path),
        payload, "handler", tmp_path / "linked", repository=REPOSITORY,
    )  # fmt: skip
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.fail("the test needs /dev/shm on a file system other than the test's tmp_path")
    elsewhere = Path(tempfile.mkdtemp(prefix="contrast-base-", dir=shm))
    try:
        shutil.copytree(base_path, elsewhere / "base")
        base = payloadimage.read_base(elsewhere / "base")
        copied = payloadimage.write_payload_image(
            base, payload, "handler", tmp_path / "copied", repository=REPOSITORY
        )
        for checked in base.layers:
            written = blob_path(copied.layout, checked.descriptor.digest)
            assert written.stat().st_dev != checked.path.stat().st_dev
    finally:
        shutil.rmtree(elsewhere)
    assert copied.digest == linked.digest
    assert layout_files(copied.layout) == layout_files(linked.layout)


@pytest.fixture
def checked_base(tmp_path: Path) -> tuple[payloadimage.BaseImage, Path]:
    base_path = base_layout(tmp_path / "base")
    base = payloadimage.read_base(base_path)
    return base, blob_path(base_path, base.layers[0].descriptor.digest)


def test_a_base_layer_written_after_the_check_is_refused_and_nothing_is_left(
    tmp_path: Path, payload: Path, checked_base: tuple[payloadimage.BaseImage, Path]
) -> None:
    base, blob = checked_base
    status = blob.stat()
    with blob.open("r+b") as file:  # one byte changed in place: the same inode and size
        file.seek(LAYER_SIZE // 2)
        byte = file.read(1)
        file.seek(LAYER_SIZE // 2)
        file.write(bytes([byte[0] ^ 1]))
    # As a write a moment later leaves it (the clock ticks coarser than the test runs).
    os.utime(blob, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    output = tmp_path / "out"
    with pytest.raises(payloadimage.PayloadImageError) as error:
        payloadimage.write_payload_image(base, payload, "handler", output, repository=REPOSITORY)
    digest = base.layers[0].descriptor.digest
    assert error.value.message == (
        f"{blob} changed after it was checked: it no longer holds layer {digest}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "payload"]
    assert blob.stat().st_nlink == 1  # the link made and refused is gone with the staging


def test_a_base_layer_replaced_after_the_check_is_copied_and_checked(
    tmp_path: Path, payload: Path, checked_base: tuple[payloadimage.BaseImage, Path]
) -> None:
    base, blob = checked_base
    original = blob.read_bytes()
    replacement = blob.with_name("replacement")
    replacement.write_bytes(original)  # the same bytes in another file
    os.replace(replacement, blob)
    image = payloadimage.write_payload_image(
        base, payload, "handler", tmp_path / "out", repository=REPOSITORY
    )
    written = blob_path(image.layout, base.layers[0].descriptor.digest)
    assert written.stat().st_ino != blob.stat().st_ino  # a copy, not a link to another file
    assert written.read_bytes() == original
    # Other bytes of the same size under the name: refused, the first layout left as it was.
    forged = bytearray(original)
    forged[-9] ^= 1
    replacement.write_bytes(forged)
    os.replace(replacement, blob)
    before = layout_files(image.layout)
    with pytest.raises(payloadimage.PayloadImageError, match="changed after it was checked"):
        payloadimage.write_payload_image(
            base, payload, "handler", tmp_path / "out", repository=REPOSITORY
        )
    assert layout_files(image.layout) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "out", "payload"]
    assert hashlib.sha256(written.read_bytes()).hexdigest() == written.name
