"""How long the test cluster takes to start with its binaries cached (issue 25), against etcd
alone started in the same run.

`scripts/cluster.sh up DIR` is timed from the command's start to its return (the node Ready,
CoreDNS answering through its Service, the default ServiceAccount made), then `down` on its own.
The baseline is the cluster's own etcd started on loopback until its /health answers: every
cluster start contains one, so the ratio says what the rest of Kubernetes adds on this machine.
The binaries are built first if they are not cached (not timed here; the time of the build that
made the cache is printed, which was cold only if Go's build cache was empty). Needs root, like
the cluster.

Run: `.venv/bin/python bench/bench_cluster.py [rounds]`.
"""

from __future__ import annotations

import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contrast.local.processes import free_port

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "cluster.sh"
GOAL_SECONDS = 60.0


def etcd_start(etcd: Path) -> float:
    """Seconds from starting etcd on a fresh data directory to its /health answering."""
    client, peer = free_port(), free_port()
    data = Path(tempfile.mkdtemp(prefix="bench-etcd-"))
    started = time.perf_counter()
    process = subprocess.Popen(
        [
            str(etcd),
            *("--data-dir", str(data), "--log-level", "error", "--unsafe-no-fsync"),
            f"--listen-client-urls=http://127.0.0.1:{client}",
            f"--advertise-client-urls=http://127.0.0.1:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", client, timeout=1)
                connection.request("GET", "/health")
                if connection.getresponse().status == 200:
                    return time.perf_counter() - started
            except OSError:
                pass
            if process.poll() is not None:
                raise SystemExit("etcd exited while starting")
            time.sleep(0.01)
    finally:
        process.terminate()
        process.wait()
        shutil.rmtree(data, ignore_errors=True)


def script(action: str, directory: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        ["bash", str(SCRIPT), action, str(directory)],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"cluster.sh {action} failed:\n{result.stderr.decode(errors='replace')}")
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    rounds = int(argv[0]) if argv else 3
    if os.geteuid() != 0:
        print("bench_cluster needs root (the cluster makes a network namespace and mounts)")
        return 1
    built = subprocess.run(
        ["bash", str(SCRIPT), "build"],
        capture_output=True,
        check=True,
    )
    cache = Path(built.stdout.decode().strip())
    ups, downs, etcds = [], [], []
    for _ in range(rounds):
        etcds.append(etcd_start(cache / "bin" / "etcd"))
        directory = Path(tempfile.mkdtemp(prefix="contrast-kc-", dir="/tmp"))
        try:
            ups.append(script("up", directory))
        finally:
            downs.append(script("down", directory))
            shutil.rmtree(directory, ignore_errors=True)
    up, etcd = statistics.median(ups), statistics.median(etcds)
    cold = cache / "build-seconds"
    if cold.is_file():
        # Cold only if Go's own build cache was empty then (README: the measured cold build).
        print(f"the build that made this cache          {int(cold.read_text()):5d} s")
    print(f"etcd alone, start → /health            {etcd:8.2f} s  (baseline)")
    print(
        f"cluster.sh up, cached binaries         {up:8.2f} s  "
        f"({up / etcd:.0f}x etcd; goal < {GOAL_SECONDS:.0f} s;"
        f" max {max(ups):.2f} s, {rounds} rounds)"
    )
    print(f"cluster.sh down                        {statistics.median(downs):8.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
