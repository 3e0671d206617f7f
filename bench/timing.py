"""Timing shared by the benchmarks: the best of several loops, least disturbed by other load."""

from __future__ import annotations

import compileall
import os
import statistics
import time
from collections.abc import Callable

import contrast

# Commands are timed as an installed `contrast` runs: with its byte code written and read. With
# PYTHONDONTWRITEBYTECODE set (as some shells and CI images do) every process would compile the
# package's modules from source again, tens of milliseconds that no user's installation pays.
INSTALLED_ENV = {
    name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"
}


def write_byte_code() -> None:
    """Compile the `contrast` package to byte code, as installing it does."""
    compileall.compile_dir(os.path.dirname(contrast.__file__), quiet=1)


def best_per_call(function: Callable[[], object], iterations: int, rounds: int = 5) -> float:
    """Seconds per call: the best of `rounds` timed loops of `iterations` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(iterations):
            function()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best


def best_interleaved(
    functions: dict[str, Callable[[], object]], iterations: int, rounds: int = 7
) -> dict[str, float]:
    """Seconds per call of each function: the best of `rounds`, the functions' loops taking turns.

    A baseline and the operation measured against it are timed in alternation, so that load from
    elsewhere on a shared machine falls on both alike instead of on whichever ran during it.
    """
    best = dict.fromkeys(functions, float("inf"))
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.perf_counter()
            for _ in range(iterations):
                function()
            best[name] = min(best[name], (time.perf_counter() - start) / iterations)
    return best


def median_ratios(
    functions: dict[str, Callable[[], object]], baseline: str, iterations: int, rounds: int = 200
) -> dict[str, float]:
    """Each function's cost as a multiple of `baseline`'s: the median, over `rounds`, of the
    ratio of their times in that round (short loops, taking turns).

    On a shared host the best of a few long loops swings by a tenth from one run to the next:
    the baseline's best may come from a quiet moment the other loop did not get. A ratio taken
    within each round shares that round's load, and the median of many is stable to about 0.01.
    It also keeps what the operation really costs beside other work: after the Python around
    a signature check, the check itself runs slower than in a loop of nothing else.
    """
    ratios: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(rounds):
        times = {}
        for name, function in functions.items():
            start = time.perf_counter()
            for _ in range(iterations):
                function()
            times[name] = time.perf_counter() - start
        for name in functions:
            ratios[name].append(times[name] / times[baseline])
    return {name: statistics.median(values) for name, values in ratios.items()}
