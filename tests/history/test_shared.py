"""Shared reads: callers of one key share a read, but only one sent after they called."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from contrast.history.errors import HistoryError
from contrast.history.shared import SharedReads

WAIT = 30.0  # a deadline against hangs, never a measured time


class Backend:
    """Counts reads; each read blocks until the test releases it, and returns its number."""

    def __init__(self) -> None:
        self.sent = 0
        self.release: dict[int, threading.Event] = {}
        self.fail: set[int] = set()
        self._lock = threading.Lock()

    def gate(self, number: int) -> threading.Event:
        with self._lock:
            return self.release.setdefault(number, threading.Event())

    def read(self, key: str) -> str:
        with self._lock:
            self.sent += 1
            number = self.sent
        assert self.gate(number).wait(WAIT)
        if number in self.fail:
            raise HistoryError(f"read {number} failed")
        return f"{key}#{number}"


def until(condition: Callable[[], bool]) -> None:
    event = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if condition():
            return
        event.wait(0.01)
    raise AssertionError("the condition did not come true")


def call(shared: SharedReads[str], key: str, results: list[str | Exception]) -> threading.Thread:
    def run() -> None:
        try:
            results.append(shared.read(key))
        except HistoryError as error:
            results.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_callers_that_arrive_during_a_read_share_the_next_one_not_that_one() -> None:
    backend = Backend()
    shared = SharedReads(backend.read)
    first: list[str | Exception] = []
    threads = [call(shared, "head", first)]
    until(lambda: backend.sent == 1)  # read 1 is on its way
    later: list[str | Exception] = []
    threads += [call(shared, "head", later) for _ in range(5)]
    until(lambda: shared.waiting("head") == 5)
    assert backend.sent == 1  # nobody sent another read while one is in flight
    backend.gate(1).set()
    backend.gate(2).set()
    for thread in threads:
        thread.join(WAIT)
    assert first == ["head#1"]
    assert later == ["head#2"] * 5  # what read 1 found may be older than their request
    assert backend.sent == 2
    assert shared.pending_keys() == 0  # nothing is kept once answered


def test_a_failed_read_fails_every_caller_that_shared_it_and_the_next_read_is_fresh() -> None:
    backend = Backend()
    backend.fail.add(2)
    shared = SharedReads(backend.read)
    results: list[str | Exception] = []
    threads = [call(shared, "head", results)]
    until(lambda: backend.sent == 1)
    failed: list[str | Exception] = []
    threads += [call(shared, "head", failed) for _ in range(3)]
    until(lambda: shared.waiting("head") == 3)
    backend.gate(1).set()
    backend.gate(2).set()
    for thread in threads:
        thread.join(WAIT)
    assert results == ["head#1"]
    assert [str(error) for error in failed] == ["read 2 failed"] * 3
    backend.gate(3).set()
    assert shared.read("head") == "head#3"


def test_different_keys_never_wait_for_each_other() -> None:
    backend = Backend()
    shared = SharedReads(backend.read)
    results: list[str | Exception] = []
    blocked = call(shared, "a", results)
    until(lambda: backend.sent == 1)
    backend.gate(2).set()
    assert shared.read("b") == "b#2"
    backend.gate(1).set()
    blocked.join(WAIT)
    assert results == ["a#1"]


@pytest.mark.parametrize("callers", [1, 8])
def test_sequential_reads_are_each_sent(callers: int) -> None:
    backend = Backend()
    for number in range(1, callers + 1):
        backend.gate(number).set()
    shared = SharedReads(backend.read)
    assert [shared.read("head") for _ in range(callers)] == [
        f"head#{n}" for n in range(1, callers + 1)
    ]
