"""The Coordinator's CPU for one SetManifest, and one GetManifests of every document back, of N
real-size policies through gRPC with TLS, taking turns between trees.

`bench_set_real_size` times SetManifest in process; this bench adds what the user API costs on
top: receiving ~570 MB through gRPC and TLS, reading the request, and writing GetManifests'
answer. Each round and tree: a Coordinator process (that tree's `src` first on the path, a fresh
file-system history) serves the user API on loopback; this process sends the same pre-encoded
request (a raw unary call, no serializer) and asks the server for its process time before and
after each call. The floor, measured in this process between the rounds: sha256 of the request's
bytes, the least any server must do with them.

Run: `.venv/bin/python bench/bench_user_api_grpc.py [N] [ROUNDS] [--before SRC]`
(default 10 000 policies, 5 rounds).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's own helpers

from abrounds import REPO, spread, taking_turns, trees
from bench_set_real_size import request

SERVER = """
import resource, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from contrast.atls.identity import TlsIdentity
from contrast.atls.issuers import EmulatedSnpIssuer
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Coordinator, utc_now
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.history.history import History
from contrast.history.store import FileSystemStore
from contrast.manifest.verifier import workload_verifier
history = History(FileSystemStore(Path(sys.argv[2])))
coordinator = Coordinator(history, verifier_for=workload_verifier)
issuer = EmulatedSnpIssuer(EmulatedSnp(Path(sys.argv[3])), bytes(32))
server = CoordinatorServer(coordinator, issuer, TlsIdentity.generate(now=utc_now()),
    host="127.0.0.1", ports=Ports(0, 0, 0))
server.start()
print(server.ports.user_api, flush=True)
for line in sys.stdin:
    print(time.process_time(), flush=True)
server.stop(grace=0)
"""


def run(src: Path, payload: bytes, directory: Path) -> dict[str, float]:
    """One round on tree `src`: server CPU and wall of SetManifest, then of GetManifests."""
    import grpc  # noqa: PLC0415 - this tree's client, after the path is set

    from contrast.api import services  # noqa: PLC0415
    from contrast.atls.client import fetch_certificate, pinned_channel  # noqa: PLC0415

    state = Path(tempfile.mkdtemp(dir=directory))
    command = [sys.executable, "-c", SERVER, str(src), str(state), str(directory / "tee")]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        target = f"127.0.0.1:{int(child.stdout.readline())}"
        channel = pinned_channel(
            target, fetch_certificate(target), options=services.USER_API_MESSAGE_OPTIONS
        )
        # Connected before the clock starts; "no manifest yet" is an answer too.
        with contextlib.suppress(grpc.RpcError):
            services.UserApiClient(channel).get_manifests(without_policies=True)

        def server_cpu() -> float:
            assert child.stdin is not None
            assert child.stdout is not None
            child.stdin.write("x\n")
            child.stdin.flush()
            return float(child.stdout.readline())

        figures: dict[str, float] = {}
        for name, path, body in (
            ("set", services.SET_MANIFEST.path, payload),
            ("get", services.GET_MANIFESTS.path, b""),
        ):
            before = server_cpu()
            started = time.perf_counter()
            answer = channel.unary_unary(path)(body, timeout=600)
            figures[f"{name}_wall"] = time.perf_counter() - started
            figures[f"{name}_cpu"] = server_cpu() - before
        assert len(answer) > len(payload) // 2, "GetManifests did not return the documents"
        channel.close()
    finally:
        child.stdin.close()
        child.wait(timeout=60)
        shutil.rmtree(state)
    return figures


def floor(payload: bytes) -> dict[str, float]:
    started = time.process_time()
    hashlib.sha256(payload).digest()
    return {"cpu": time.process_time() - started}


def main(argv: list[str]) -> None:
    sources = trees(argv)
    count = int(argv[0]) if argv else 10_000
    rounds = int(argv[1]) if len(argv) > 1 else 5
    sys.path.insert(0, str(REPO / "src"))
    from contrast.api.wire import SetManifest  # noqa: PLC0415

    with tempfile.TemporaryDirectory(dir="/tmp") as temporary:
        directory = Path(temporary)
        with open(request(directory, count), "rb") as file:
            manifest, documents = pickle.load(file)
        payload = SetManifest(manifest, documents).encode()
        del documents
        loads: list[float] = []

        def measure(src: Path) -> dict[str, float]:
            loads.append(os.getloadavg()[0])
            return run(src, payload, directory)

        measures = {name: partial(measure, src) for name, src in sources.items()}
        results = taking_turns(rounds, {"sha256 floor": partial(floor, payload)} | measures)
    floors = [figures["cpu"] for figures in results.pop("sha256 floor")]
    print(
        f"{count} real-size policies ({len(payload) / 1e6:.0f} MB) through gRPC+TLS, {rounds}"
        f" rounds taking turns, load average {min(loads):.1f}-{max(loads):.1f};"
        f" floor (sha256 of the request) {spread(floors)} s"
    )
    for call in ("set", "get"):
        label = "SetManifest" if call == "set" else "GetManifests, every document back"
        print(f"{label}:")
        for name, runs in results.items():
            cpu = [figures[f"{call}_cpu"] for figures in runs]
            ratios = [value / low for value, low in zip(cpu, floors, strict=True)]
            print(
                f"  {name:10} server CPU {spread(cpu)} s ({spread(ratios, 2)}x the floor),"
                f" wall {spread(figures[f'{call}_wall'] for figures in runs)} s"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
