"""Endless inputs for tests of bounded readers: a FIFO whose writer never stops."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def endless_fifo(path: Path) -> Iterator[Path]:
    """A FIFO at `path` whose writer writes until its reader goes away."""
    os.mkfifo(path)
    stop = threading.Event()

    def write() -> None:
        descriptor = os.open(path, os.O_WRONLY)  # waits for a reader
        try:
            while not stop.is_set():
                os.write(descriptor, b"abandon " * 8192)
        except BrokenPipeError:
            pass  # the reader stopped reading: what a bounded reader does
        finally:
            os.close(descriptor)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield path
    finally:
        stop.set()
        # A writer still waiting for a reader is let through by one that reads nothing.
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(timeout=10)
