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
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from replicas import replicas_with_manifest  # bench/replicas.py, beside this script

GOAL_RATE = 1000.0
GOAL_P99_MS = 50.0


def client(
    target: str,
    tee_dir: str,
    policy_hash: str,
    *,
    seconds: float,
    only_nonce: bool,
) -> None:
    """One client process: connect, say so, run for `seconds` from the start time the parent
    sends once every client is connected, then print the latencies (ms)."""
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
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    time.sleep(max(0.0, start_at - time.time()))  # every client starts at the same moment
    cpu_started = time.process_time()
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
    cpu = time.process_time() - cpu_started
    channel.close()
    print(json.dumps({"latencies": latencies, "cpu": cpu}))


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes so far (Linux /proc; fields 14 and 15)."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Load:
    rate: float  # round trips per second, all clients together
    p50: float  # ms
    p99: float  # ms
    server_cpu: float  # ms of Coordinator CPU per round trip
    client_cpu: float  # ms of client CPU per round trip


def load(targets: list[str], tee_dir: Path, policy_hash: bytes, clients: int, seconds: float, *,
         only_nonce: bool, servers: list[int]) -> Load:  # fmt: skip
    """Round trips per second, p50 and p99 in ms, and the CPU each one cost server and client.

    The CPU figures say where the 2 cores went: the clients share the machine with the
    Coordinator, so their CPU per round trip bounds the rate as much as the server's does.

    The clock starts only once every client process has started and connected (on a busy
    machine that takes anywhere from 10 s to a minute), so each one runs the whole window.
    """
    processes = []
    for index in range(clients):
        argv = [
            sys.executable, __file__, "--client", targets[index % len(targets)], str(tee_dir),
            policy_hash.hex(), str(seconds), "nonce" if only_nonce else "cert",
        ]  # fmt: skip
        processes.append(
            subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
    for process in processes:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise SystemExit("a client failed to connect")
    start_at = f"{time.time() + 0.5}\n"
    what = "GetNonce" if only_nonce else "GetNonce + NewMeshCert"
    print(f"{clients} clients connected, measuring {what}", file=sys.stderr, flush=True)
    for process in processes:
        assert process.stdin is not None
        process.stdin.write(start_at)
        process.stdin.flush()
    server_cpu_started = cpu_seconds(servers)
    latencies: list[float] = []
    client_cpu = 0.0
    for process in processes:
        out, _ = process.communicate(timeout=seconds + 120)
        if process.returncode != 0:
            raise SystemExit(f"a client failed with exit code {process.returncode}")
        result = json.loads(out)
        latencies += result["latencies"]
        client_cpu += result["cpu"]
    server_cpu = cpu_seconds(servers) - server_cpu_started
    quantiles = statistics.quantiles(latencies, n=100)
    count = len(latencies)
    return Load(
        count / seconds,
        quantiles[49],
        quantiles[98],
        server_cpu * 1e3 / count,
        client_cpu * 1e3 / count,
    )


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--client":
        target, tee_dir, policy_hash, seconds, what = argv[1:6]
        client(
            target,
            tee_dir,
            policy_hash,
            seconds=float(seconds),
            only_nonce=what == "nonce",
        )
        return 0
    clients = int(argv[0]) if argv else 64
    seconds = float(argv[1]) if len(argv) > 1 else 10.0
    replicas = int(argv[2]) if len(argv) > 2 else 1
    from contrast.local.demo import SERVER  # noqa: PLC0415

    with replicas_with_manifest(replicas) as demo:
        targets = [f"127.0.0.1:{demo.replicas[index].mesh}" for index in range(replicas)]
        tee_dir = demo.state / "tee"
        # The demo runs each replica as a local process (`contrast.local.processes.Process`).
        servers = [demo.coordinators[index].popen.pid for index in range(replicas)]
        cert = load(targets, tee_dir, SERVER.policy_hash, clients, seconds,
                    only_nonce=False, servers=servers)  # fmt: skip
        base = load(targets, tee_dir, SERVER.policy_hash, clients, seconds,
                    only_nonce=True, servers=servers)  # fmt: skip
    print(f"clients: {clients} processes, {seconds:.0f} s each run, {replicas} replica(s)")
    verdict = "met" if cert.rate >= GOAL_RATE and cert.p99 <= GOAL_P99_MS else "MISSED"
    cores = os.cpu_count() or 1
    for name, run, goal in (
        ("GetNonce only (baseline)", base, ""),
        ("GetNonce + NewMeshCert", cert,
         f"  (goal ≥ {GOAL_RATE:.0f}/s, p99 ≤ {GOAL_P99_MS:.0f} ms: {verdict})"),
    ):  # fmt: skip
        print(f"{name:28} {run.rate:7.0f}/s  p50 {run.p50:6.1f} ms  p99 {run.p99:6.1f} ms{goal}")
        print(f"{'':28} CPU per round trip: Coordinator {run.server_cpu:.2f} ms, client"
              f" {run.client_cpu:.2f} ms; {cores} cores allow at most"
              f" {cores * 1e3 / (run.server_cpu + run.client_cpu):.0f}/s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
