"""Coordinator NewMeshCert under load: clients in separate processes, against one GetNonce.

The Coordinator runs as its own process (`contrast coordinator`, emulated SNP) with a manifest
set; CLIENTS processes each keep one pinned channel to the mesh API and loop for SECONDS:
GetNonce, evidence for a fresh key bound to that nonce, NewMeshCert, as an Initializer does.
Printed: certificates per second and p50/p99 latency of the GetNonce + NewMeshCert pair, and
as a baseline the same clients calling only GetNonce (the round trip with no work behind it).
Goals (issue 14, 2-core machine, 64 clients): ≥ 1000/s and p99 ≤ 50 ms. With `replicas` > 1
(issue 13), that many Coordinator replicas share one history directory, the others recover from
the first by peer recovery, and the clients are spread over them round-robin.

Run: `.venv/bin/python bench/bench_meshcert.py [clients] [seconds] [replicas]`.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_RATE = 1000.0
GOAL_P99_MS = 50.0


def client(
    target: str,
    tee_dir: str,
    policy_hash: str,
    *,
    start_at: float,
    seconds: float,
    only_nonce: bool,
) -> None:
    """One client process: from `start_at` (wall clock) for `seconds`; print latencies (ms)."""
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

    from contrast.api import meshapi_pb2  # noqa: PLC0415
    from contrast.api.convert import evidence_to_proto  # noqa: PLC0415
    from contrast.api.services import MeshApiClient  # noqa: PLC0415
    from contrast.atls.client import fetch_certificate, pinned_channel  # noqa: PLC0415
    from contrast.atls.issuers import EmulatedSnpIssuer  # noqa: PLC0415
    from contrast.atls.reportdata import public_key_der, report_data  # noqa: PLC0415
    from contrast.attestation.emulated.snp import EmulatedSnp  # noqa: PLC0415

    issuer = EmulatedSnpIssuer(EmulatedSnp(Path(tee_dir)), bytes.fromhex(policy_hash))
    channel = pinned_channel(target, fetch_certificate(target))
    api = MeshApiClient(channel, timeout=30)
    api.get_nonce()  # connected before the clock starts
    time.sleep(max(0.0, start_at - time.time()))  # every client starts at the same moment
    latencies = []
    end = start_at + seconds
    while time.time() < end:
        started = time.perf_counter()
        nonce = api.get_nonce()
        if not only_nonce:
            key = ec.generate_private_key(ec.SECP256R1())
            public_key = public_key_der(key.public_key())
            evidence = issuer.issue(report_data(public_key, nonce))
            api.new_mesh_cert(
                meshapi_pb2.NewMeshCertRequest(
                    Nonce=nonce, PublicKey=public_key, Evidence=evidence_to_proto(evidence)
                )
            )
        latencies.append((time.perf_counter() - started) * 1e3)
    channel.close()
    print(json.dumps(latencies))


def load(targets: list[str], tee_dir: Path, policy_hash: bytes, clients: int, seconds: float, *,
         only_nonce: bool) -> tuple[float, float, float]:  # fmt: skip
    """Requests per second, p50 and p99 in ms, over all client processes."""
    start_at = time.time() + 5 + clients * 0.25  # the processes start and connect first
    processes = []
    for index in range(clients):
        argv = [
            sys.executable, __file__, "--client", targets[index % len(targets)], str(tee_dir),
            policy_hash.hex(), str(start_at), str(seconds), "nonce" if only_nonce else "cert",
        ]  # fmt: skip
        processes.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
    latencies: list[float] = []
    for process in processes:
        out, _ = process.communicate(timeout=seconds + 120)
        if process.returncode != 0:
            raise SystemExit(f"a client failed with exit code {process.returncode}")
        latencies += json.loads(out)
    quantiles = statistics.quantiles(latencies, n=100)
    return len(latencies) / seconds, quantiles[49], quantiles[98]


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--client":
        target, tee_dir, policy_hash, start_at, seconds, what = argv[1:7]
        client(
            target,
            tee_dir,
            policy_hash,
            start_at=float(start_at),
            seconds=float(seconds),
            only_nonce=what == "nonce",
        )
        return 0
    clients = int(argv[0]) if argv else 64
    seconds = float(argv[1]) if len(argv) > 1 else 10.0
    replicas = int(argv[2]) if len(argv) > 2 else 1
    from contrast.client import operations  # noqa: PLC0415
    from contrast.client.workspace import Workspace  # noqa: PLC0415
    from contrast.local.demo import CLIENT, COORDINATOR, SERVER, Demo  # noqa: PLC0415
    from contrast.local.workspace import (  # noqa: PLC0415
        RESOURCES,
        emulated_reference_values,
        write_workspace,
    )

    with tempfile.TemporaryDirectory() as directory:
        demo = Demo(Path(directory), say=lambda _: None)
        try:
            values = emulated_reference_values(demo.tee, demo.state / "tee")
            write_workspace(demo.workdir, values, [COORDINATOR, SERVER, CLIENT])
            demo.start_coordinators(*range(replicas))
            operations.set_manifest(demo.target, Workspace(demo.workdir), demo.workdir / RESOURCES)
            demo.wait_ready(*range(replicas))
            targets = [f"127.0.0.1:{demo.replicas[index].mesh}" for index in range(replicas)]
            tee_dir = demo.state / "tee"
            rate, p50, p99 = load(targets, tee_dir, SERVER.policy_hash, clients, seconds,
                                  only_nonce=False)  # fmt: skip
            base_rate, base_p50, base_p99 = load(targets, tee_dir, SERVER.policy_hash, clients,
                                                 seconds, only_nonce=True)  # fmt: skip
        finally:
            demo.processes.stop_all()
    print(f"clients: {clients} processes, {seconds:.0f} s each run, {replicas} replica(s)")
    print(f"GetNonce only (baseline)      {base_rate:7.0f}/s  p50 {base_p50:6.1f} ms"
          f"  p99 {base_p99:6.1f} ms")  # fmt: skip
    verdict = "met" if rate >= GOAL_RATE and p99 <= GOAL_P99_MS else "MISSED"
    print(f"GetNonce + NewMeshCert        {rate:7.0f}/s  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms"
          f"  (goal ≥ {GOAL_RATE:.0f}/s, p99 ≤ {GOAL_P99_MS:.0f} ms: {verdict})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
