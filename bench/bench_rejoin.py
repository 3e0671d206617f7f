"""How long a Coordinator replica killed with SIGKILL takes to be ready again (issue 13).

Three replicas (`contrast coordinator`, emulated SNP) share one history directory and list each
other as peers, as in `contrast demo`; a manifest is set through the first and the others
recover from it. Then, ROUNDS times, one replica (in turn) is killed with SIGKILL and started
again; measured from the new process's start to its readiness probe saying `ready`, split into
start-up (until its ports listen: interpreter, imports, TLS key) and peer recovery (until ready:
the first attempt runs at start-up, so the retry interval does not count).

Run: `.venv/bin/python bench/bench_rejoin.py [rounds]`.
"""

from __future__ import annotations

import statistics
import sys
import time

from replicas import replicas_with_manifest  # bench/replicas.py, beside this script


def main(argv: list[str]) -> int:
    rounds = int(argv[0]) if argv else 15
    from contrast.local.demo import REPLICAS  # noqa: PLC0415

    totals: list[float] = []
    recoveries: list[float] = []
    with replicas_with_manifest(REPLICAS) as demo:
        for round_number in range(rounds):
            index = round_number % REPLICAS
            demo.coordinators[index].kill()
            started = time.perf_counter()
            demo.start_coordinators(index)
            recoveries.append(demo.wait_ready(index))
            totals.append(time.perf_counter() - started)

    def describe(samples: list[float]) -> str:
        return f"median {statistics.median(samples):5.2f} s  max {max(samples):5.2f} s"

    print(f"{rounds} kills (SIGKILL) of one of {REPLICAS} replicas, each restarted at once")
    print(f"process start → ready            {describe(totals)}")
    print(f"listening → ready (peer recovery) {describe(recoveries)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
