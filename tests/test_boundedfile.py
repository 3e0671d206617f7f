"""`read_bounded` refuses endless and oversized files quickly, holding no more than the bound."""

from __future__ import annotations

import io
import os
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contrast.boundedfile import (
    FileTooLarge,
    check_size,
    describe_size,
    read_bounded,
    read_stream_bounded,
    read_text_stream_bounded,
)
from tests import endless

BOUND = 1 << 20
# Refusing reads the bound once: far below a second even on a loaded CI machine.
QUICK_SECONDS = 2.0


def _measured(read: Callable[[], object]) -> tuple[object, int, float]:
    """What `read()` returned or raised, the most memory it held (tracemalloc), its seconds."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        outcome: object = read()
    except Exception as error:
        outcome = error
    seconds = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return outcome, peak, seconds


def _assert_refused(path: Path) -> None:
    outcome, peak, seconds = _measured(lambda: read_bounded(path, BOUND, what="the share"))
    assert isinstance(outcome, FileTooLarge), outcome
    assert str(outcome) == f"the share {path} is larger than 1 MiB, the most accepted"
    assert peak < BOUND + (256 << 10), peak
    assert seconds < QUICK_SECONDS, seconds


def test_dev_zero_is_refused_after_the_bound() -> None:
    _assert_refused(Path("/dev/zero"))


def test_an_oversized_regular_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge"
    with path.open("wb") as file:
        file.truncate(8 << 30)  # sparse: 8 GiB that nothing needs to hold
    outcome, peak, seconds = _measured(lambda: read_bounded(path, BOUND, what="the share"))
    assert isinstance(outcome, FileTooLarge)
    assert peak < 64 << 10, peak  # its size alone refuses it
    assert seconds < QUICK_SECONDS


@pytest.fixture
def endless_fifo(tmp_path: Path) -> Iterator[Path]:
    with endless.endless_fifo(tmp_path / "fifo") as path:
        yield path


def test_an_endless_fifo_is_refused_after_the_bound(endless_fifo: Path) -> None:
    _assert_refused(endless_fifo)


def test_a_file_within_the_bound_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "share"
    for size in (0, 1, BOUND - 1, BOUND):
        path.write_bytes(b"a" * size)
        assert read_bounded(path, BOUND, what="the share") == b"a" * size
    path.write_bytes(b"a" * (BOUND + 1))
    with pytest.raises(FileTooLarge):
        read_bounded(path, BOUND, what="the share")


def test_a_pipe_within_the_bound_is_read_whole(tmp_path: Path) -> None:
    reader, writer = os.pipe()
    data = os.urandom(200_000)  # more than a pipe holds, so it comes in pieces

    def write() -> None:
        with open(writer, "wb") as file:
            file.write(data)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert read_bounded(Path(f"/dev/fd/{reader}"), BOUND, what="the share") == data
    finally:
        thread.join()
        os.close(reader)


def test_a_stream_is_bounded_too() -> None:
    assert read_stream_bounded(io.BytesIO(b"abc"), 3, name="-", what="the input") == b"abc"
    with pytest.raises(FileTooLarge, match="the input - is larger than 3 bytes"):
        read_stream_bounded(io.BytesIO(b"abcd"), 3, name="-", what="the input")


def test_a_text_stream_is_bounded_by_its_characters() -> None:
    """A StringIO has no byte buffer: more characters than the bound are more bytes too."""
    assert read_text_stream_bounded(io.StringIO("a" * 8), 8, name="on stdin", what="x") == "a" * 8
    with pytest.raises(FileTooLarge, match=r"^the YAML on stdin is larger than 8 bytes"):
        read_text_stream_bounded(io.StringIO("a" * 9), 8, name="on stdin", what="the YAML")


def test_a_file_another_program_reads_is_refused_by_its_size(tmp_path: Path) -> None:
    """As read_bounded refuses it, unread; what is not a regular file is left to that program."""
    large = tmp_path / "kernel"
    large.write_bytes(bytes(9))
    with pytest.raises(FileTooLarge, match=f"^the kernel {large} is larger than 8 bytes"):
        check_size(large, 8, what="the kernel", hint="use the release's")
    check_size(tmp_path / "kernel.small", 8, what="the kernel")  # absent: that program says so
    check_size(Path("/dev/zero"), 8, what="the kernel")
    (tmp_path / "kernel.small").write_bytes(bytes(8))
    check_size(tmp_path / "kernel.small", 8, what="the kernel")


def test_errors_of_the_file_system_are_left_to_the_caller(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "missing", BOUND, what="the share")
    with pytest.raises(IsADirectoryError):
        read_bounded(tmp_path, BOUND, what="the share")


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (300, "300 bytes"),
        (8 << 10, "8 KiB"),
        (4 << 20, "4 MiB"),
        (1 << 30, "1 GiB"),
        (1536, "1536 bytes"),
    ],
)
def test_sizes_are_described_in_whole_units(size: int, text: str) -> None:
    assert describe_size(size) == text
