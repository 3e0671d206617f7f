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
import tempfile
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    rounds = int(argv[0]) if argv else 15
    from contrast.client import operations  # noqa: PLC0415
    from contrast.client.workspace import Workspace  # noqa: PLC0415
    from contrast.local.demo import CLIENT, COORDINATOR, REPLICAS, SERVER, Demo  # noqa: PLC0415
    from contrast.local.workspace import (  # noqa: PLC0415
        RESOURCES,
        emulated_reference_values,
        write_workspace,
    )

    totals: list[float] = []
    recoveries: list[float] = []
    with tempfile.TemporaryDirectory() as directory:
        demo = Demo(Path(directory), say=lambda _: None)
        try:
            values = emulated_reference_values(demo.tee, demo.state / "tee")
            write_workspace(demo.workdir, values, [COORDINATOR, SERVER, CLIENT])
            demo.start_coordinators(*range(REPLICAS))
            operations.set_manifest(demo.target, Workspace(demo.workdir), demo.workdir / RESOURCES)
            demo.wait_ready(*range(REPLICAS))
            for round_number in range(rounds):
                index = round_number % REPLICAS
                demo.coordinators[index].kill()
                started = time.perf_counter()
                demo.start_coordinators(index)
                recoveries.append(demo.wait_ready(index))
                totals.append(time.perf_counter() - started)
        finally:
            demo.processes.stop_all()

    def describe(samples: list[float]) -> str:
        return f"median {statistics.median(samples):5.2f} s  max {max(samples):5.2f} s"

    print(f"{rounds} kills (SIGKILL) of one of {REPLICAS} replicas, each restarted at once")
    print(f"process start → ready            {describe(totals)}")
    print(f"listening → ready (peer recovery) {describe(recoveries)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
