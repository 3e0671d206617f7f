"""The build's pieces that need no network: layers, the lock, what an image leaves out."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import tracemalloc
import zipfile
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest

from contrast.imagebuild import payloadimage
from contrast.imagebuild.build import build
from contrast.imagebuild.debian import excluded
from contrast.imagebuild.layer import CHUNK, Entry, Layer, write_layer
from contrast.imagebuild.lock import BuildError, Lock, Wheel
from contrast.imagebuild.oci import LayoutWriter
from contrast.imagebuild.python import project_wheel
from contrast.imagebuild.spec import IMAGES


def layer_of(entries: list[Entry], epoch: int) -> tuple[Layer, bytes]:
    """The layer and its blob, written into memory."""
    blob = io.BytesIO()
    layer = write_layer(entries, epoch, blob)
    return layer, blob.getvalue()


def test_a_layer_is_the_same_bytes_whatever_the_order_of_its_entries() -> None:
    entries = [
        Entry.file("usr/bin/tool", b"x", 0o755),
        Entry.symlink("bin", "usr/bin"),
        Entry.file("etc/passwd", b"root"),
    ]
    first = layer_of(entries, 1)
    second = layer_of(list(reversed(entries)), 1)
    assert first == second
    assert layer_of(entries, 2)[0].digest != first[0].digest
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(first[1]))) as tar:
        names = tar.getnames()
        assert names == sorted(names)
        assert "usr" in names  # parents are written too
        assert {member.uname for member in tar} == {"root"}


def test_a_changed_byte_changes_the_layer() -> None:
    assert layer_of([Entry.file("a", b"1")], 1)[0] != layer_of([Entry.file("a", b"2")], 1)[0]


@pytest.mark.parametrize(
    ("path", "left_out"),
    [
        ("bin/sh", True),
        ("usr/bin/dpkg", True),
        ("var/lib/dpkg/status", True),
        ("usr/share/doc/libc6/copyright", False),
        ("usr/share/doc/libc6/changelog.Debian.gz", True),
        ("usr/bin/python3.11", False),
        ("usr/share/man/man1/python3.11.1.gz", True),
        ("dev/null", True),
    ],
)
def test_what_an_image_leaves_out(path: str, left_out: bool) -> None:
    assert excluded(path) is left_out


def test_the_lock_round_trips_and_bad_locks_say_how_to_fix_them() -> None:
    lock = Lock(
        debian={"python": {"libc6": "2.36-9"}},
        python={"coordinator": (Wheel("grpcio", "1.0", "grpcio-1.0.whl", "ab" * 32),)},
    )
    assert Lock.from_bytes(lock.to_bytes()) == lock
    with pytest.raises(BuildError) as error:
        Lock.from_bytes(b'{"format": 1}')
    assert "--relock" in error.value.explain()
    with pytest.raises(BuildError, match="format"):
        Lock.from_bytes(b'{"format": 2, "debian": {}, "python": {}}')


def test_a_build_outside_a_checkout_says_where_the_source_must_come_from(tmp_path: Path) -> None:
    lock = Lock(debian={}, python={})
    with pytest.raises(BuildError, match="not a checkout") as error:
        build(tmp_path, tmp_path / "out", lock=lock, cache=tmp_path / "cache", epoch=1)
    assert "--source" in error.value.explain()
    assert not (tmp_path / "out").exists()


def test_the_project_wheel_holds_the_source_and_not_what_an_earlier_build_left(
    tmp_path: Path,
) -> None:
    """setuptools builds in the source's build/: a module deleted since stays in build/lib there."""
    repo = Path(__file__).resolve().parents[2]
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (checkout / name).write_bytes((repo / name).read_bytes())
    (checkout / "src/contrast").mkdir(parents=True)
    (checkout / "src/contrast/__init__.py").write_text('"""A checkout."""\n')
    stale = checkout / "build/lib/contrast/deleted_since.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("LEFT = 'by an earlier build'\n")
    wheel = project_wheel(checkout, tmp_path / "out" / "wheel", epoch=1)
    names = zipfile.ZipFile(wheel).namelist()
    assert "contrast/__init__.py" in names
    assert "contrast/deleted_since.py" not in names
    assert stale.is_file()  # the checkout is read, never written
    assert not (checkout / "src/contrast.egg-info").exists()


def in_memory_layer(entries: list[Entry], epoch: int) -> tuple[str, str, bytes]:
    """The layer as write_layer made it in b84f7a7, before it streamed: all the tar, then gzip.

    Kept verbatim as the reference the streamed layer must match byte for byte, so the release
    images' digests do not change; a file named by its path is read whole here.
    """
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
                data = entry.data if entry.source is None else entry.source.read_bytes()
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            else:
                info.linkname = entry.target
                archive.addfile(info)
    tar = plain.getvalue()
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=compressed, mode="wb", compresslevel=6, mtime=0) as out:
        out.write(tar)
    blob = compressed.getvalue()
    return (
        f"sha256:{hashlib.sha256(blob).hexdigest()}",
        f"sha256:{hashlib.sha256(tar).hexdigest()}",
        blob,
    )


def half_random(size: int) -> bytes:
    """Half incompressible, half zeros, as a guest image is: both of deflate's paths."""
    return os.urandom(size // 2) + bytes(size - size // 2)


def entry_sets(tmp_path: Path) -> dict[str, list[Entry]]:
    big = half_random(5 * CHUNK + 4097)  # more than one chunk and not a multiple of 512
    (tmp_path / "big").write_bytes(big)
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "small").write_bytes(b"#!/bin/sh\n")
    return {
        "none": [],
        "one directory": [Entry.directory("tmp", 0o1777)],
        "files, links, modes": [
            Entry.file("usr/bin/tool", b"x", 0o755),
            Entry.symlink("bin", "usr/bin"),
            Entry.file("etc/passwd", b"root"),
            Entry.directory("root", 0o700),
            Entry.file("etc/empty", b""),
            Entry.file("etc/passwd", b"root:x:0:0::/root:/sbin/nologin\n"),  # the last one wins
        ],
        "long and non-ASCII names (pax headers)": [
            Entry.file("a/" + "b" * 120 + "/c", b"deep"),
            Entry.file("usr/share/zoneinfo/Amérique/Zürich", "ünïcode".encode()),
            Entry.symlink("l", "t" * 150),
        ],
        "many small files": [
            Entry.file(f"site/{n % 7}/m{n}.py", f"value = {n}\n".encode() * (n % 50))
            for n in range(700)
        ],
        "big file from bytes": [Entry.file("opt/image", big)],
        "files from disk": [
            Entry.from_file("opt/image", tmp_path / "big"),
            Entry.from_file("opt/empty", tmp_path / "empty"),
            Entry.from_file("opt/bin/run", tmp_path / "small", 0o755),
            Entry.file("opt/VERSION", b"1\n"),
        ],
    }


def test_a_streamed_layer_is_byte_for_byte_the_layer_made_in_memory(tmp_path: Path) -> None:
    for name, entries in entry_sets(tmp_path).items():
        digest, diff_id, blob = in_memory_layer(entries, 1700000000)
        layer, streamed = layer_of(entries, 1700000000)
        assert streamed == blob, name
        assert layer == Layer(digest, diff_id, len(blob)), name
    # A file named by its path gives the layer of its bytes given inline.
    sets = entry_sets(tmp_path)
    assert layer_of(sets["files from disk"], 1) == layer_of(
        [
            Entry.file("opt/image", (tmp_path / "big").read_bytes()),
            Entry.file("opt/empty", b""),
            Entry.file("opt/bin/run", b"#!/bin/sh\n", 0o755),
            Entry.file("opt/VERSION", b"1\n"),
        ],
        1,
    )


def test_the_layout_writer_puts_a_layer_under_its_digest_and_nothing_else(tmp_path: Path) -> None:
    sets = entry_sets(tmp_path)
    writer = LayoutWriter(tmp_path / "layout")
    layer = writer.layer(sets["files from disk"], 1)
    again = writer.layer(sets["files from disk"], 1)  # the same blob: written once
    assert again == layer
    blobs = tmp_path / "layout/blobs/sha256"
    assert [path.name for path in blobs.iterdir()] == [layer.digest.removeprefix("sha256:")]
    blob = (blobs / layer.digest.removeprefix("sha256:")).read_bytes()
    assert (layer.digest, layer.diff_id, blob) == in_memory_layer(sets["files from disk"], 1)
    assert layer.size == len(blob)
    assert (tmp_path / "layout/oci-layout").is_file()  # a layout from the first write on


def test_a_file_that_changes_while_its_layer_is_written_is_refused(tmp_path: Path) -> None:
    """/proc's files say 0 bytes and hold more; /sys's say 4096 and hold fewer: no race needed."""
    writer = LayoutWriter(tmp_path / "layout")
    grows = Entry.from_file("status", Path("/proc/self/status"))
    shrinks = Entry.from_file("online", Path("/sys/devices/system/cpu/online"))
    assert Path(shrinks.source or "").stat().st_size > len(Path(shrinks.source or "").read_bytes())
    with pytest.raises(BuildError, match="/proc/self/status grew while it was written"):
        writer.layer([grows], 1)
    with pytest.raises(BuildError, match="cpu/online became shorter while it was written"):
        writer.layer([Entry.file("a", b"a"), shrinks], 1)
    assert list((tmp_path / "layout/blobs/sha256").iterdir()) == []  # no temporary left


def test_an_image_copies_a_layer_of_another_layout_checked_against_its_digest(
    tmp_path: Path,
) -> None:
    spec = next(spec for spec in IMAGES if spec.name == "coordinator")
    elsewhere = LayoutWriter(tmp_path / "elsewhere").layer([Entry.file("a", b"a" * 5000)], 1)
    assert elsewhere.path is not None
    writer = LayoutWriter(tmp_path / "layout")
    blobs = tmp_path / "layout/blobs/sha256"
    held_nowhere = Layer(elsewhere.digest, elsewhere.diff_id, elsewhere.size)
    with pytest.raises(
        BuildError, match=f"lacks layer {elsewhere.digest} and it is stored nowhere"
    ):
        writer.image(spec, [held_nowhere], epoch=1)
    tampered = tmp_path / "tampered"
    data = bytearray(elsewhere.path.read_bytes())
    data[-9] ^= 1  # the gzip trailer's CRC: still the same size
    tampered.write_bytes(data)
    with pytest.raises(BuildError, match=f"does not hold layer {elsewhere.digest}"):
        writer.image(spec, [replace(elsewhere, path=tampered)], epoch=1)
    assert list(blobs.iterdir()) == []  # nothing under the digest, no temporary
    image = writer.image(spec, [elsewhere], epoch=1)
    assert (blobs / elsewhere.digest.removeprefix("sha256:")).read_bytes() == (
        elsewhere.path.read_bytes()
    )
    assert image.size > elsewhere.size


def test_the_payload_image_is_written_in_little_memory(tmp_path: Path) -> None:
    """The payload layer streams from the payload's files into the layout: 32 MiB of payload,
    under 8 MiB allocated at the peak (the layer built in memory held the payload three times)."""
    base_layout = tmp_path / "base"
    writer = LayoutWriter(base_layout)
    spec = next(spec for spec in IMAGES if spec.name == "node-installer")
    base_layer = writer.layer([Entry.file("usr/bin/contrast", b"#!/bin/false\n", 0o755)], 1)
    writer.image(spec, [base_layer], epoch=1)
    writer.finish()
    payload = tmp_path / "payload"
    (payload / "share").mkdir(parents=True)
    (payload / "share/guest.img").write_bytes(half_random(32 << 20))
    (payload / "runtime.json").write_bytes(b"{}\n")
    (payload / "kata-shim").write_bytes(b"\x7fELF")
    (payload / "kata-shim").chmod(0o755)
    base = payloadimage.read_base(base_layout)
    tracemalloc.start()
    try:
        image = payloadimage.write_payload_image(
            base, payload, "handler", tmp_path / "out", repository="registry.example.com/n"
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak / 2**20:.1f} MiB at the peak"
    digest, diff_id, blob = in_memory_layer(
        payloadimage.payload_entries(payload, "handler"), 1700000000
    )
    assert (image.layer.digest, image.layer.diff_id) == (digest, diff_id)
    written = tmp_path / "out/blobs/sha256" / digest.removeprefix("sha256:")
    assert written.read_bytes() == blob
