"""Layer reading without a registry: whiteouts, links, compression forms, digest checks."""

from __future__ import annotations

import functools
import gzip
import io
import logging
import posixpath
import random
import threading

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from contrast.images.layers import (
    OPAQUE_MARKER,
    LayerFacts,
    LayerFile,
    _clean,
    merge_file,
    read_layer,
)
from contrast.images.manifest import Descriptor
from contrast.images.model import ImageError
from contrast.images.streams import CHUNK_SIZE, DigestMismatch
from tests.images import imagebuild as build

ABSENT = LayerFile()
DELETED = LayerFile(deleted=True)


def read(layer: build.Layer, media_type: str | None = None) -> LayerFacts:
    blob = layer.blob
    descriptor = Descriptor(media_type or blob.media_type, blob.digest, len(blob.data))
    return read_layer(io.BytesIO(blob.data), descriptor, layer.diff_id, "layer 1 of test")


def test_files_whiteouts_and_opaque_directories() -> None:
    facts = read(
        build.layer(
            [
                build.file("./etc/passwd", "a:x:1:1::/:/bin/sh\n"),
                build.file("etc/.wh.group", ""),
                build.file("usr/etc/group", "not this one"),
                build.file("etc/passwd.bak", "nor this"),
            ]
        )
    )
    assert facts.passwd == LayerFile(content="a:x:1:1::/:/bin/sh\n")
    assert facts.group == DELETED
    opaque = read(build.layer([build.file("etc/.wh..wh..opq", ""), build.file("etc/group", "")]))
    assert opaque.passwd == DELETED
    assert opaque.group == LayerFile(content="", deleted=True)  # empty, but present
    untouched = read(build.layer([build.file("srv/x", "y")]))
    assert (untouched.passwd, untouched.group) == (ABSENT, ABSENT)
    assert untouched.size == build.layer([build.file("srv/x", "y")]).uncompressed_size


@pytest.mark.parametrize(
    "entries",
    [
        [build.file(".wh.etc", "")],
        [build.file(".wh..wh..opq", "")],
        [build.symlink("etc", "private/etc")],
        [build.file("etc", "a file where etc was")],
    ],
    ids=["etc-whiteout", "root-opaque", "etc-symlink", "etc-file"],
)
def test_etc_removed_deletes_both(entries: list[build.Entry]) -> None:
    facts = read(build.layer(entries))
    assert (facts.passwd, facts.group) == (DELETED, DELETED)


def test_links(caplog: pytest.LogCaptureFixture) -> None:
    facts = read(
        build.layer(
            [build.file("etc/group", "g:x:1:\n"), build.hardlink("etc/passwd", "etc/group")]
        )
    )
    assert facts.passwd.content == "g:x:1:\n"
    with caplog.at_level(logging.WARNING):
        linked = read(build.layer([build.symlink("etc/passwd", "../usr/share/passwd")]))
    assert linked.passwd == LayerFile(content="")
    assert "symlink" in caplog.text
    assert "../usr/share/passwd" in caplog.text


def test_paths_are_relative_to_the_root() -> None:
    facts = read(
        build.layer([build.file("../../etc/passwd", "evil"), build.file("/etc/group", "g")])
    )
    # `..` above the root stays at the root, as in tar extraction into a container rootfs.
    assert facts.passwd.content == "evil"
    assert facts.group.content == "g"


def test_uncompressed_and_multi_member_gzip() -> None:
    plain = build.layer([build.file("etc/passwd", "p")], compress=False)
    assert read(plain).passwd.content == "p"
    tar = build.tar_bytes([build.file("etc/group", "two members")])
    half = len(tar) // 2
    data = gzip.compress(tar[:half]) + gzip.compress(tar[half:])
    layer = build.Layer(build.Blob(data, build.OCI_LAYER_GZIP), build.sha256(tar), len(tar))
    assert read(layer).group.content == "two members"


def test_zstd_is_refused_clearly() -> None:
    zstd_frame = b"\x28\xb5\x2f\xfd" + bytes(60)
    layer = build.Layer(
        build.Blob(zstd_frame, "application/vnd.oci.image.layer.v1.tar+zstd"),
        "sha256:" + "1" * 64,
        0,
    )
    with pytest.raises(ImageError, match="zstd") as caught:
        read(layer)
    assert caught.value.hint is not None


def test_corrupted_gzip_reports_the_digest_not_the_parse_error() -> None:
    layer = build.layer([build.file("etc/passwd", "x" * 10000)])
    data = bytearray(layer.blob.data)
    data[len(data) // 2] ^= 0x55
    broken = build.Layer(build.Blob(bytes(data), layer.blob.media_type), layer.diff_id, 0)
    descriptor = Descriptor(layer.blob.media_type, layer.blob.digest, len(data))
    with pytest.raises(DigestMismatch, match=layer.blob.digest):
        read_layer(io.BytesIO(broken.blob.data), descriptor, layer.diff_id, "layer 1 of test")


def test_longer_than_descriptor_and_truncated() -> None:
    layer = build.layer([build.file("etc/passwd", "p")])
    short = Descriptor(layer.blob.media_type, layer.blob.digest, len(layer.blob.data) - 10)
    with pytest.raises(DigestMismatch, match="larger"):
        read_layer(io.BytesIO(layer.blob.data), short, layer.diff_id, "layer")
    full = Descriptor(layer.blob.media_type, layer.blob.digest, len(layer.blob.data))
    with pytest.raises(ImageError):
        read_layer(io.BytesIO(layer.blob.data[:-10]), full, layer.diff_id, "layer")


def test_not_a_tar() -> None:
    data = gzip.compress(b"this is not a tar archive" * 40)
    layer = build.Layer(
        build.Blob(data, build.OCI_LAYER_GZIP), build.sha256(gzip.decompress(data)), 0
    )
    with pytest.raises(ImageError, match="tar"):
        read(layer)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ([], ""),
        ([LayerFile("a")], "a"),
        ([LayerFile("a"), ABSENT], "a"),
        ([LayerFile("a"), DELETED], ""),
        ([LayerFile("a"), DELETED, LayerFile("b")], "b"),
        ([LayerFile("a"), LayerFile("b", deleted=True)], "b"),
        ([LayerFile("a"), LayerFile("")], ""),
    ],
)
def test_merge(changes: list[LayerFile], expected: str) -> None:
    assert merge_file(changes) == expected


def _layer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("layer-") and t.is_alive()]


# More chunks than the stages' queues hold, so that every thread is busy when the reader stops.
BIG = 16 * CHUNK_SIZE + 7


@functools.cache
def _big_layer() -> tuple[bytes, build.Layer]:
    """A layer of many chunks whose passwd comes after a large file the walk skips."""
    tar = build.tar_bytes(
        [
            build.file("usr/lib/big", random.Random(1).randbytes(BIG)),
            build.file("etc/passwd", "p:x:1:1::/:/bin/sh\n"),
        ]
    )
    data = gzip.compress(tar, compresslevel=1)
    return tar, build.Layer(build.Blob(data, build.OCI_LAYER_GZIP), build.sha256(tar), len(tar))


def test_a_layer_of_many_chunks_is_read_and_leaves_no_thread() -> None:
    tar, layer = _big_layer()
    facts = read(layer)
    assert facts.passwd.content == "p:x:1:1::/:/bin/sh\n"
    assert facts.size == len(tar)
    assert not _layer_threads()


def test_a_flipped_byte_in_a_skipped_file_fails_the_diff_id() -> None:
    tar, layer = _big_layer()
    flipped = bytearray(tar)
    flipped[2 * CHUNK_SIZE] ^= 0x01  # inside usr/lib/big, which the walk seeks over
    data = gzip.compress(bytes(flipped), compresslevel=1)
    blob = build.Blob(data, build.OCI_LAYER_GZIP)  # the blob's own digest is right
    with pytest.raises(DigestMismatch, match=r"diff_id\).*expected " + layer.diff_id):
        read(build.Layer(blob, layer.diff_id, len(tar)))
    assert not _layer_threads()


@pytest.mark.parametrize("position", [0.1, 0.5, 0.9])
def test_a_flipped_compressed_byte_is_a_digest_mismatch_and_leaves_no_thread(
    position: float,
) -> None:
    _, layer = _big_layer()
    data = bytearray(layer.blob.data)
    data[int(len(data) * position)] ^= 0x01
    descriptor = Descriptor(layer.blob.media_type, layer.blob.digest, len(data))
    with pytest.raises(DigestMismatch, match=layer.blob.digest):
        read_layer(io.BytesIO(bytes(data)), descriptor, layer.diff_id, "layer 1 of test")
    assert not _layer_threads()


class _FailingSource:
    """The blob's bytes up to `limit`, then the connection breaks."""

    def __init__(self, data: bytes, limit: int) -> None:
        self._data = io.BytesIO(data)
        self._limit = limit

    def read(self, size: int = -1, /) -> bytes:
        if self._data.tell() >= self._limit:
            raise ConnectionResetError("the registry hung up")
        return self._data.read(min(size, self._limit - self._data.tell()))


def test_an_error_reading_the_blob_surfaces_and_leaves_no_thread() -> None:
    _, layer = _big_layer()
    descriptor = Descriptor(layer.blob.media_type, layer.blob.digest, len(layer.blob.data))
    source = _FailingSource(layer.blob.data, len(layer.blob.data) // 2)
    with pytest.raises(ConnectionResetError, match="hung up"):
        read_layer(source, descriptor, layer.diff_id, "layer 1 of test")
    assert not _layer_threads()


def test_errors_in_parsing_leave_no_thread() -> None:
    data = gzip.compress(b"this is not a tar archive" * (BIG // 25), compresslevel=1)
    layer = build.Layer(
        build.Blob(data, build.OCI_LAYER_GZIP), build.sha256(gzip.decompress(data)), 0
    )
    with pytest.raises(ImageError, match="tar"):
        read(layer)
    assert not _layer_threads()


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.sampled_from(["et", "c", "tc", "e", "passwd", ".wh", "wh.", ".", "..", "", "x/"]),
        max_size=8,
    ).map("/".join)
)
def test_names_the_scan_passes_over_never_matter(name: str) -> None:
    """The scan skips entries whose name has neither `etc` nor `.wh.` before cleaning their path
    (nearly all of them): cleaning never makes such a name one that the scan acts on."""
    assume("etc" not in name and ".wh." not in name)
    path = _clean(name)
    if path is not None:
        assert path != OPAQUE_MARKER
        assert path not in {".wh.etc", "etc"}
        assert posixpath.dirname(path) != "etc"
