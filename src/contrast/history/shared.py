"""Concurrent reads of one key share a request, but never one sent before the caller asked.

The Coordinator reads the history head before every certificate so that it never issues under a
superseded manifest (`contrast.coordinator.core`). Against the Kubernetes API that is one GET per
certificate, a round trip of milliseconds, and under load most of them overlap. Serving callers
from a cache, even one a few milliseconds old, would let a replica issue under a head that was
already replaced when the request arrived. Sharing keeps the guarantee instead: a caller joins
only a read that has not been sent yet, so whatever it gets was read after it asked, exactly as
if it had sent its own. At most one read per key is in flight; callers that arrive meanwhile
wait for it to finish and then share the next one. Nothing is kept once a read is answered, so
the bookkeeping is bounded by the callers waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Read(Generic[T]):
    """One read and the callers that share it."""

    callers: int = 1
    done: bool = False
    value: T | None = None
    error: Exception | None = None

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # set whenever error is not


class SharedReads(Generic[T]):
    """`read(key)` with concurrent callers of one key sharing a read sent after they called."""

    def __init__(self, read: Callable[[str], T]) -> None:
        self._read = read
        self._changed = threading.Condition()
        self._in_flight: set[str] = set()
        self._next: dict[str, _Read[T]] = {}  # the read each key's new callers join

    def read(self, key: str) -> T:
        with self._changed:
            pending = self._next.get(key)
            if pending is not None:  # not sent yet: it will be sent after we asked
                pending.callers += 1
                while not pending.done:
                    self._changed.wait()
                return pending.outcome()
            pending = self._next[key] = _Read()
            while key in self._in_flight:
                self._changed.wait()
            # Sent from here on: later callers make (and wait for) the next one.
            del self._next[key]
            self._in_flight.add(key)
        try:
            pending.value = self._read(key)
        except Exception as error:  # handed to every caller that shares this read
            pending.error = error
        with self._changed:
            pending.done = True
            self._in_flight.discard(key)
            self._changed.notify_all()
        return pending.outcome()

    def waiting(self, key: str) -> int:
        """How many callers wait for the next, not yet sent, read of `key` (for tests)."""
        with self._changed:
            pending = self._next.get(key)
            return 0 if pending is None else pending.callers

    def pending_keys(self) -> int:
        """Keys with a read sent or about to be (bounded by the callers waiting; for tests)."""
        with self._changed:
            return len(self._in_flight | self._next.keys())
