"""A one-line progress display for layer pulls, on stderr when it is a terminal.

Redrawn with a carriage return as bytes arrive (at most every `REDRAW_BYTES`, so a fast pull does
not spend its time printing); silent when stderr is a pipe or a file, so logs stay clean.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

REDRAW_BYTES = 512 * 1024
_MIB = 1024 * 1024


class PullProgress:
    """Counts layers and bytes done out of a known total; thread-safe."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = self._stream.isatty() if enabled is None else enabled
        self._lock = threading.Lock()
        self._layers_total = 0
        self._layers_done = 0
        self._bytes_total = 0
        self._bytes_done = 0
        self._drawn_at = 0
        self._drawn = False

    def start(self, layers: int, size: int) -> None:
        with self._lock:
            self._layers_total, self._bytes_total = layers, size
            self._layers_done = self._bytes_done = self._drawn_at = 0
            if layers:
                self._draw()

    def add_bytes(self, count: int) -> None:
        with self._lock:
            self._bytes_done += count
            if self._bytes_done - self._drawn_at >= REDRAW_BYTES:
                self._draw()

    def layer_done(self) -> None:
        with self._lock:
            self._layers_done += 1
            self._draw()

    def finish(self) -> None:
        with self._lock:
            if self.enabled and self._drawn:
                self._stream.write("\n")
                self._stream.flush()
            self._drawn = False

    def line(self) -> str:
        """The text of the progress line as it is now."""
        return (
            f"pulling layers: {self._layers_done}/{self._layers_total} done,"
            f" {self._bytes_done / _MIB:.1f}/{self._bytes_total / _MIB:.1f} MiB"
        )

    def _draw(self) -> None:
        self._drawn_at = self._bytes_done
        if not self.enabled:
            return
        self._stream.write(f"\r{self.line()}\x1b[K")
        self._stream.flush()
        self._drawn = True
