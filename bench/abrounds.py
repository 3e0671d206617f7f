"""A/B rounds shared by the benchmarks: this tree's `src` against another commit's, taking turns.

A bench given `--before SRC` (a `src` directory of another commit) measures the same thing on both
trees. The trees, and the floor a bench measures beside them, take turns round by round instead
of one after the other, so that load from elsewhere on a shared host falls on all of them alike
and not on whichever ran while it lasted; each figure is then read from its rounds (`spread`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[1]
THIS_TREE = "this tree"
BEFORE = "before"

T = TypeVar("T")


def trees(argv: list[str]) -> dict[str, Path]:
    """{"this tree": this checkout's src} and, when `argv` has `--before SRC`, {"before": SRC};
    the two words are taken out of `argv`, so the bench reads its other arguments as before."""
    found = {THIS_TREE: REPO / "src"}
    if "--before" in argv:
        at = argv.index("--before")
        if at + 1 >= len(argv):
            raise SystemExit("--before needs a src directory (another commit's)")
        found[BEFORE] = Path(argv[at + 1])
        del argv[at : at + 2]
    return found


def taking_turns(rounds: int, measures: Mapping[str, Callable[[], T]]) -> dict[str, list[T]]:
    """Each measure called once a round, in the order given, for `rounds` rounds; each one's
    results by name, in the order of the rounds."""
    results: dict[str, list[T]] = {name: [] for name in measures}
    for _ in range(rounds):
        for name, measure in measures.items():
            results[name].append(measure())
    return results


def spread(values: Iterable[float], digits: int = 3) -> str:
    """`median (least-most)` of a figure's rounds, with `digits` decimals."""
    ordered = sorted(values)
    least, most = ordered[0], ordered[-1]
    return f"{statistics.median(ordered):.{digits}f} ({least:.{digits}f}-{most:.{digits}f})"
