"""The CLI as a user feels it: whole processes, against the interpreter starting and doing nothing.

`contrast --help` and `contrast evidence verify` on the example SNP evidence, each run as its own
process (the median of 7), taking turns with `python -c pass` and the library floor below.
Goals (issue 14, on a 2-core machine): `--help` ≤ 0.1 s, `evidence verify` ≤ 0.15 s.

`evidence verify` is also set against what no code of ours can avoid: the interpreter importing
`cryptography.x509` (loading any certificate imports it) and the OpenSSL backend (which
`cryptography` imports when an ECDSA signature is checked). The rest is ours.

The processes run with the package's byte code written and read, as an installed `contrast`
does (`timing.INSTALLED_ENV`).

Run: `.venv/bin/python bench/bench_cli.py [runs]`.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from timing import INSTALLED_ENV, write_byte_code  # bench/timing.py, beside this script

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "evidence" / "snp-milan-oak"
CONTRAST = [sys.executable, "-m", "contrast.cli.main"]
GOALS = {"contrast --help": 0.10, "contrast evidence verify": 0.15}
LIBRARY_FLOOR = "import cryptography.x509, cryptography.hazmat.backends.openssl.backend"


def seconds(commands: dict[str, list[str]], runs: int) -> dict[str, float]:
    """Median wall time of `runs` processes of each command, the commands taking turns.

    In turns, a slow stretch of a shared host falls on all of them alike, so the differences
    between them (ours above the library floor) are steadier than their absolute values.
    """
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            started = time.perf_counter()
            subprocess.run(
                argv,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
                env=INSTALLED_ENV,
            )
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    runs = int(arguments[0]) if arguments else 7
    verify = [
        *CONTRAST, "evidence", "verify", str(EXAMPLE / "report.bin"), "--format", "snp",
        "--cert", str(EXAMPLE / "vcek.der"), "--at", "2025-02-01T00:00:00Z",
    ]  # fmt: skip
    write_byte_code()
    timed = seconds(
        {
            "floor": [sys.executable, "-c", "pass"],
            "library": [sys.executable, "-c", LIBRARY_FLOOR],
            "contrast --help": [*CONTRAST, "--help"],
            "contrast evidence verify": verify,
        },
        runs,
    )
    floor, library = timed.pop("floor"), timed.pop("library")
    measured = timed
    print(f"{'python -c pass (floor)':28} {floor:6.3f} s")
    print(f"{'+ cryptography (floor)':28} {library:6.3f} s  x509 and the OpenSSL backend")
    for name, value in measured.items():
        verdict = "met" if value <= GOALS[name] else "MISSED"
        print(
            f"{name:28} {value:6.3f} s  {value / floor:4.1f} × floor"
            f"  (goal ≤ {GOALS[name]:.2f} s: {verdict})"
        )
    ours = measured["contrast evidence verify"] - library
    print(f"{'evidence verify − floors':28} {ours:6.3f} s  ours: CLI, parsing, verification")
    return 0


if __name__ == "__main__":
    sys.exit(main())
