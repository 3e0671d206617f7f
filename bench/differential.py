"""Differential verification, long form: our SNP/TDX verifiers against Google's (issue 24).

Runs both on every real vector of ../shared/testdata/attestation and on N seeded mutations
(default 100 000), then prints the inputs run, the agreements and each class of disagreement
with examples, each marked with the README's name for it or NOT KNOWN. Exits 1 if any
disagreement is not a documented one, or if our verifier crashed (anything but its own errors).
The short form runs in CI (tests/attestation/test_differential.py); see tests/attestation/
differential.py for the cases and the mutations.

Run: `.venv/bin/python bench/differential.py [mutations] [seed]`.
"""

from __future__ import annotations

import sys
import time
from itertools import chain
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the harness lives with the tests

from tests.attestation import differential  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    mutations = int(arguments[0]) if arguments else 100_000
    seed = int(arguments[1]) if len(arguments) > 1 else 24
    started = time.monotonic()
    driver = differential.driver_path()
    built = time.monotonic()
    real = differential.real_cases()
    summary = differential.run(chain(real, differential.mutated_cases(mutations, seed)), driver)
    finished = time.monotonic()
    print(f"real vectors: {len(real)}, mutations: {mutations} (seed {seed})")
    print(differential.report(summary, examples=2))
    print(f"driver ready in {built - started:.1f} s, both verifiers in {finished - built:.1f} s")
    ours_crashed = [c for c in summary.crashes if c[1].reason.startswith("crash:")]
    return 1 if summary.unknown or ours_crashed else 0


if __name__ == "__main__":
    sys.exit(main())
