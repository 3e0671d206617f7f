"""Timing shared by the benchmarks: the best of several loops, least disturbed by other load."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_per_call(function: Callable[[], object], iterations: int, rounds: int = 5) -> float:
    """Seconds per call: the best of `rounds` timed loops of `iterations` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(iterations):
            function()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best
