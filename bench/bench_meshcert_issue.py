"""Issuing one mesh leaf (`issue_mesh_certificate` and its PEM) against one raw P-384 signature.

The floor is what issuing must do: one ECDSA P-384 signature with SHA-384 by the mesh key over
bytes of a TBSCertificate's size, through the same library. Each round runs in a fresh process
per tree (this tree's `src` and, with `--before SRC`, another commit's), the trees taking turns
round by round; in each, the floor and the issue alternate in short batches and the figure is
CPU time of the calling thread, so load elsewhere on a shared host falls on both alike.

Run: `.venv/bin/python bench/bench_meshcert_issue.py [ROUNDS] [--before SRC]` (default 5 rounds).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's own helpers

from abrounds import spread, taking_turns, trees

BATCH = 200
BATCHES = 15

MEASURE = """
import json, statistics, time
from datetime import UTC, datetime
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from contrast.ca.authority import CertificateAuthority

now = datetime.now(UTC)
ca = CertificateAuthority.create(
    ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1()), now=now
)
key = ec.generate_private_key(ec.SECP256R1()).public_key()
sans = ["web", "*", "web.default.svc.cluster.local"]
secret_id = "apps/v1/Deployment/default/web"
tbs_size = len(ca.issue_mesh_certificate(key, sans, now=now).tbs_certificate_bytes)
data = bytes(tbs_size)

def floor():
    ca.mesh_key.sign(data, ec.ECDSA(hashes.SHA384()))

def issue():
    leaf = ca.issue_mesh_certificate(key, sans, now=now, workload_secret_id=secret_id)
    leaf.public_bytes(serialization.Encoding.PEM)

def batch(work):
    start = time.thread_time()
    for _ in range(%(batch)d):
        work()
    return (time.thread_time() - start) / %(batch)d * 1e3

issue(); floor()
floors, issues = [], []
for _ in range(%(batches)d):
    floors.append(batch(floor))
    issues.append(batch(issue))
print(json.dumps({"floor": statistics.median(floors), "issue": statistics.median(issues)}))
"""


def measure(src: Path) -> dict[str, float]:
    code = MEASURE % {"batch": BATCH, "batches": BATCHES}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    args = sys.argv[1:]
    sources = trees(args)
    rounds = int(args[0]) if args else 5
    results = taking_turns(rounds, {name: partial(measure, src) for name, src in sources.items()})
    print(f"{rounds} rounds, {BATCHES} alternating batches of {BATCH} each (thread CPU time)")
    for name, runs in results.items():
        issue = [run["issue"] for run in runs]
        floor = [run["floor"] for run in runs]
        ratio = [run["issue"] / run["floor"] for run in runs]
        print(
            f"{name:10} issue + PEM {spread(issue)} ms, floor one raw P-384 sign"
            f" {statistics.median(floor):.3f} ms, ratio {spread(ratio, 2)}, above the floor"
            f" {statistics.median(i - f for i, f in zip(issue, floor, strict=True)):.3f} ms"
        )


if __name__ == "__main__":
    main()
