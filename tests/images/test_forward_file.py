"""ForwardFile: tarfile's random-access mode over a stream that can only go forward (issue 14)."""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.images.model import ImageError
from contrast.images.streams import CHUNK_SIZE, ForwardFile


def _file(data: bytes) -> ForwardFile:
    return ForwardFile(io.BytesIO(data), "a test stream")


def test_reads_return_what_was_asked_across_chunks() -> None:
    data = bytes(range(256)) * (3 * CHUNK_SIZE // 256 + 7)
    stream = _file(data)
    assert stream.read(10) == data[:10]
    assert stream.read(CHUNK_SIZE + 5) == data[10 : CHUNK_SIZE + 15]
    assert stream.tell() == CHUNK_SIZE + 15
    assert stream.read() == data[CHUNK_SIZE + 15 :]
    assert stream.read(1) == b""


def test_seeking_forward_skips_and_backward_is_refused() -> None:
    data = bytes(range(256)) * (2 * CHUNK_SIZE // 256)
    stream = _file(data)
    assert stream.seek(CHUNK_SIZE + 3) == CHUNK_SIZE + 3
    assert stream.read(2) == data[CHUNK_SIZE + 3 : CHUNK_SIZE + 5]
    with pytest.raises(ImageError, match="backward"):
        stream.seek(4)
    assert stream.seek(len(data) + 100) == len(data)  # past the end stops at the end
    assert stream.read(1) == b""


def test_tarfile_reads_every_member_through_it() -> None:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for number, size in enumerate([0, 1, 511, 512, 513, CHUNK_SIZE + 1, 3]):
            info = tarfile.TarInfo(f"file{number}" + "x" * 120 * (number % 2))  # long names: pax
            info.size = size
            tar.addfile(info, io.BytesIO(bytes([number]) * size))
    with tarfile.open(fileobj=_file(archive.getvalue()), mode="r:") as tar:  # type: ignore[call-overload]
        read = {}
        while (member := tar.next()) is not None:
            if member.size % 2:  # read some members' data, skip the others
                extracted = tar.extractfile(member)
                assert extracted is not None
                read[member.name] = extracted.read()
    assert read == {
        "file1" + "x" * 120: b"\x01",
        "file2": b"\x02" * 511,
        "file4": b"\x04" * 513,
        "file5" + "x" * 120: b"\x05" * (CHUNK_SIZE + 1),
        "file6": b"\x06" * 3,
    }


class Chunked:
    """A source that hands out the data in the given chunk sizes, whatever is asked for."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._data = data
        self._sizes = sizes
        self._turn = 0

    def read(self, size: int = -1, /) -> bytes:
        step = self._sizes[self._turn % len(self._sizes)]
        self._turn += 1
        chunk, self._data = self._data[:step], self._data[step:]
        return chunk


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    data=st.binary(max_size=3000),
    sizes=st.lists(st.integers(1, 700), min_size=1, max_size=6),
    steps=st.lists(
        st.tuples(st.sampled_from(["read", "seek", "tell"]), st.integers(-1, 1200)), max_size=25
    ),
)
def test_any_reads_and_forward_seeks_match_a_file(
    data: bytes, sizes: list[int], steps: list[tuple[str, int]]
) -> None:
    expected = io.BytesIO(data)
    stream = ForwardFile(Chunked(data, sizes), "a test stream")
    for operation, amount in steps:
        if operation == "read":
            assert stream.read(amount) == expected.read(amount)
        elif operation == "seek":
            # Forward only, as tarfile seeks; a file goes past the end where the stream stops.
            target = expected.tell() + max(amount, 0)
            expected.seek(min(target, len(data)))
            assert stream.seek(target) == expected.tell()
        assert stream.tell() == expected.tell()
