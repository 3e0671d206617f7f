"""SetManifest of N real-size policies in process, this tree against `--before SRC` (issue 29).

The policies are the initdata `contrast generate` writes for a one-container Deployment (the
packaged rules and settings, ~57 KB each, each workload's own name in its data: 10 000 are
568 MB), the manifest lists them all (about 1.9 MB). Each round starts one process per tree (its
`src` first on the path), which loads the request, makes a Coordinator on a fresh file-system
state and times `Coordinator.set_manifest` (the first manifest: no gRPC, no protobuf), CPU of
the process and wall, then, in the same process, its floor: sha256 of every document once, what
the Coordinator must do with the bytes it got. The trees take turns round by round
(`abrounds`), so load from elsewhere falls on both. Printed per tree: CPU and wall (median and
range of the rounds), the per-round ratio of CPU to the floor, the bytes stored under `packs/`,
and the process's peak RSS. Goal: at most 1 s of CPU for 10 000.

Run: `.venv/bin/python bench/bench_set_real_size.py [N] [ROUNDS] [--before SRC]`.
"""

from __future__ import annotations

import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' deployment helpers

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from tests.coordinator.conftest import Deployment, policy
from tests.coordinator.crash_step_worker import generated_policy

from abrounds import spread, taking_turns, trees
from contrast.attestation.emulated.snp import EmulatedSnp

# Runs in a process of its own with one tree's src first: argv is SRC REQUEST STATE.
CHILD = """
import hashlib, json, os, pickle, resource, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from contrast.coordinator.core import Coordinator
from contrast.history.history import History
from contrast.history.store import FileSystemStore
from contrast.manifest.verifier import workload_verifier

with open(sys.argv[2], "rb") as file:
    manifest, documents = pickle.load(file)
state = Path(sys.argv[3])
coordinator = Coordinator(History(FileSystemStore(state)), verifier_for=workload_verifier)
cpu, wall = time.process_time(), time.perf_counter()
coordinator.set_manifest(manifest, documents)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
floor_cpu, floor_wall = time.process_time(), time.perf_counter()
for document in documents:
    hashlib.sha256(document).digest()
floor_cpu, floor_wall = time.process_time() - floor_cpu, time.perf_counter() - floor_wall
packs = state / "packs"
stored = sum(path.stat().st_size for path in packs.iterdir()) if packs.is_dir() else 0
print(json.dumps({
    "cpu": cpu, "wall": wall, "floor_cpu": floor_cpu, "floor_wall": floor_wall,
    "packs": len(os.listdir(packs)) if packs.is_dir() else 0, "stored": stored,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def request(directory: Path, count: int) -> Path:
    """The first manifest of `count` workloads and their documents, pickled for the children."""
    names = ("coordinator", "web", *(f"w{index}" for index in range(count - 2)))
    policies = {name: policy(name) for name in names[:2]}
    policies |= {name: generated_policy(name) for name in names[2:]}
    deployment = Deployment(
        tee=EmulatedSnp(directory / "tee"),
        owner=ec.generate_private_key(ec.SECP384R1()),
        seedshare=rsa.generate_private_key(65537, 2048),
        policies=policies,
        state_dir=directory / "unused",
    )
    path = directory / "request.pickle"
    with open(path, "wb") as file:
        pickle.dump((deployment.manifest(names), deployment.documents(names)), file, protocol=5)
    return path


def run(src: Path, path: Path, directory: Path) -> dict[str, float]:
    state = Path(tempfile.mkdtemp(dir=directory))
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(src), str(path), str(state)],
        capture_output=True, check=False, timeout=600,
    )  # fmt: skip
    if child.returncode != 0:
        raise SystemExit(f"{src}: {child.stderr.decode()}")
    subprocess.run(["rm", "-rf", str(state)], check=True)
    result: dict[str, float] = json.loads(child.stdout)
    return result


def main(argv: list[str]) -> None:
    sources = trees(argv)
    count = int(argv[1]) if len(argv) > 1 else 10_000
    rounds = int(argv[2]) if len(argv) > 2 else 5
    with tempfile.TemporaryDirectory(dir="/tmp") as temporary:
        directory = Path(temporary)
        path = request(directory, count)
        size = path.stat().st_size
        results = taking_turns(
            rounds, {name: partial(run, src, path, directory) for name, src in sources.items()}
        )
    print(
        f"SetManifest in process, {count} real-size policies ({size / 1e6:.0f} MB request),"
        f" {rounds} rounds taking turns, load average {os.getloadavg()[0]:.1f}:"
    )
    for name, runs in results.items():
        ratios = [r["cpu"] / r["floor_cpu"] for r in runs]
        print(
            f"  {name:10} CPU {spread(r['cpu'] for r in runs)} s,"
            f" wall {spread(r['wall'] for r in runs)} s,"
            f" CPU/floor {spread(ratios, 2)} (floor: sha256 of the documents,"
            f" {spread(r['floor_cpu'] for r in runs)} s CPU);"
            f" packs {runs[0]['packs']:.0f}, {runs[0]['stored'] / 1e6:.1f} MB;"
            f" peak RSS {statistics.median(r['rss_mb'] for r in runs):.0f} MB"
        )
    if len(results) == 2:
        this, before = results.values()
        per_round = [a["cpu"] / b["cpu"] for a, b in zip(this, before, strict=True)]
        walls = [a["wall"] / b["wall"] for a, b in zip(this, before, strict=True)]
        print(
            f"  this tree / before, per round: CPU {spread(per_round, 2)}, wall {spread(walls, 2)}"
        )


if __name__ == "__main__":
    main(sys.argv)
