"""`generate`'s CPU-bound steps on every core: forked worker processes, results in input order.

Deriving a policy and writing a changed document back through ruamel are pure Python and take
milliseconds per workload, and the GIL keeps threads from running them side by side. Forked
workers inherit everything the step reads (the parsed resources, image facts, the edits) without
it being pickled; only each item's index goes out and its (small, picklable) result comes back,
in the order of the items, so the output is the same as in one process, byte for byte.

An item that fails in a worker, or a pool that breaks (a worker killed), is done again here in
this process: its error is then raised as it would have been without workers. Where `fork` is not
available, with one core, or for a few items only (starting workers costs tens of milliseconds),
everything runs here. `CONTRAST_PROCESSES=N` sets the number of workers (1: none).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")

ENVIRONMENT = "CONTRAST_PROCESSES"
# Below this many items, starting the workers costs more than they save.
MINIMUM_ITEMS = 16

# The step the forked workers run (function, items): set just before they start, so that they
# inherit it.
_job: list[tuple[Callable[[Any], Any], Sequence[Any]]] = []


class _Failed:
    """A worker's answer for an item whose step raised: the caller does it again itself."""


def workers() -> int:
    """How many processes to use: `CONTRAST_PROCESSES`, else the cores this process may use."""
    configured = os.environ.get(ENVIRONMENT, "").strip()
    if configured.isdecimal():
        return max(1, int(configured))
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def map_in_processes(
    function: Callable[[_T], _R],
    items: Sequence[_T],
    *,
    minimum: int = MINIMUM_ITEMS,
    on_result: Callable[[int, _R], None] | None = None,
) -> list[_R]:
    """`[function(item) for item in items]`, with forked workers where that pays off.

    `function` must not rely on changing anything but its result: a worker's changes stay in the
    worker. Its results must be picklable. `on_result(index, result)` is called here for each
    result as it arrives (in order, an item redone here after the others), so the caller can
    act on the first results while workers still compute the rest.
    """

    def done(index: int, result: _R) -> _R:
        if on_result is not None:
            on_result(index, result)
        return result

    count = min(workers(), len(items))
    if count < 2 or len(items) < minimum:
        return [done(index, function(item)) for index, item in enumerate(items)]
    # Imported here: a run with little to do (an unchanged re-run) starts no worker and should
    # not pay for the process pool's modules either.
    from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415
    from concurrent.futures.process import BrokenProcessPool  # noqa: PLC0415
    from multiprocessing import get_all_start_methods, get_context  # noqa: PLC0415

    if "fork" not in get_all_start_methods():
        return [done(index, function(item)) for index, item in enumerate(items)]
    for stream in (sys.stdout, sys.stderr):  # a worker flushes what it inherited when it exits
        stream.flush()
    _job[:] = [(function, items)]
    answers: list[Any] = [_Failed()] * len(items)
    # What the workers inherit is left out of their garbage collections: a full collection
    # would walk every inherited object (0.2 s of CPU at 1000 workloads) and, by touching
    # them, copy the pages they are on.
    gc.freeze()
    try:
        with ProcessPoolExecutor(count, mp_context=get_context("fork")) as pool:
            chunk = max(1, len(items) // (count * 8))
            for index, answer in enumerate(pool.map(_run, range(len(items)), chunksize=chunk)):
                answers[index] = answer
                if not isinstance(answer, _Failed):
                    done(index, answer)
    except BrokenProcessPool:
        pass  # what did not come back is done here below
    finally:
        gc.unfreeze()
        _job.clear()
    return [
        done(index, function(item)) if isinstance(answer, _Failed) else answer
        for index, (item, answer) in enumerate(zip(items, answers, strict=True))
    ]


def _run(index: int) -> Any:
    """In a worker: the step on item `index`, or `_Failed` for the caller to redo."""
    ((function, items),) = _job  # set by map_in_processes before the workers were forked
    try:
        return function(items[index])
    except Exception:
        return _Failed()
