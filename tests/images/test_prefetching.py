"""The prefetching reader: the same bytes, errors where the data would have been, a clean stop."""

from __future__ import annotations

import io
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.images.model import ImageError
from contrast.images.streams import CHUNK_SIZE, Prefetching


class Chunks:
    """A source that returns the given chunks, then raises `error` if there is one."""

    def __init__(self, chunks: list[bytes], error: Exception | None = None) -> None:
        self._chunks = list(chunks)
        self._error = error
        self.reads = 0

    def read(self, size: int = -1, /) -> bytes:
        self.reads += 1
        if self._chunks:
            return self._chunks.pop(0)
        if self._error is not None:
            raise self._error
        return b""


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    chunks=st.lists(st.binary(min_size=1, max_size=64), max_size=20),
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=5),
)
def test_the_reader_sees_the_source_s_bytes_whatever_it_asks_for(
    chunks: list[bytes], sizes: list[int]
) -> None:
    reader = Prefetching(Chunks(chunks))
    received = b""
    turn = 0
    while data := reader.read(sizes[turn % len(sizes)]):
        assert len(data) <= sizes[turn % len(sizes)]
        received += data
        turn += 1
    reader.close()
    assert received == b"".join(chunks)
    assert reader.read(10) == b""


def test_an_error_in_the_thread_is_raised_where_the_data_would_have_been() -> None:
    reader = Prefetching(Chunks([b"abc"], ImageError("the blob is corrupt")))
    assert reader.read(10) == b"abc"
    with pytest.raises(ImageError, match="the blob is corrupt"):
        reader.read(10)
    assert reader.read(10) == b""
    reader.close()


def test_close_stops_a_thread_that_is_ahead_and_bounds_what_it_holds() -> None:
    source = Chunks([bytes(CHUNK_SIZE)] * 100)
    reader = Prefetching(source, depth=2)
    assert len(reader.read(1)) == 1
    reader.close()
    reads = source.reads
    assert reads <= 1 + 2 + 2  # the one handed out, the queue, one blocked in put, one more
    assert not any(t.name == "layer-prefetch" and t.is_alive() for t in threading.enumerate())


def test_a_layer_read_through_it_is_unchanged() -> None:
    data = io.BytesIO(bytes(range(256)) * 5000)
    reader = Prefetching(data)
    out = b"".join(iter(lambda: reader.read(1000), b""))
    reader.close()
    assert out == bytes(range(256)) * 5000


def _stage_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("layer-") and t.is_alive()]


def test_a_read_after_close_raises_instead_of_waiting_forever() -> None:
    source = Chunks([b"queued", b"held"] + [b"never"] * 10)
    reader = Prefetching(source, depth=1)
    while source.reads < 2:  # the first chunk is in the queue, the thread holds the second
        time.sleep(0.001)
    reader.close()
    assert reader.read() == b"queued"
    with pytest.raises(ImageError, match="closed"):
        reader.read()


def test_stages_in_a_chain_pass_bytes_and_errors_down() -> None:
    upstream = Prefetching(Chunks([b"a" * 10, b"b" * 10], ImageError("upstream broke")))
    downstream = Prefetching(upstream, name="layer-second")
    assert downstream.read(100) == b"a" * 10
    assert downstream.read(100) == b"b" * 10
    with pytest.raises(ImageError, match="upstream broke"):
        downstream.read(100)
    downstream.close()
    upstream.close()
    assert not _stage_threads()


@pytest.mark.parametrize("downstream_first", [True, False])
def test_closing_a_chain_stops_every_thread_whatever_the_order(downstream_first: bool) -> None:
    upstream = Prefetching(Chunks([bytes(CHUNK_SIZE)] * 50), depth=1)
    downstream = Prefetching(upstream, depth=1, name="layer-second")
    assert downstream.read(1) == b"\0"
    stages = [downstream, upstream] if downstream_first else [upstream, downstream]
    for stage in stages:
        stage.close()
    assert not _stage_threads()
