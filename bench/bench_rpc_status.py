"""What the Coordinator's error-mapping interceptor (contrast.coordinator.status) costs per call.

GetNonce round trips over TLS on loopback to the mesh API of a real `CoordinatorServer` (every
call through `DeliberateStatus`), against the same servicer on a plain gRPC server without the
interceptor in the same run; then a refused call (bytes that are not a request) on both. Prints
p50 latencies and their ratio. Run: `.venv/bin/python bench/bench_rpc_status.py [CALLS]`.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

from contrast.api import services
from contrast.atls.client import fetch_certificate, pinned_channel
from contrast.atls.identity import TlsIdentity
from contrast.atls.issuers import EmulatedSnpIssuer
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Coordinator, utc_now
from contrast.coordinator.server import CoordinatorServer, MeshApi, Ports
from contrast.history.history import History
from contrast.history.store import MemoryStore
from contrast.manifest.verifier import workload_verifier


def p50_ms(call: Callable[[], object], calls: int) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def refused(channel: grpc.Channel) -> Callable[[], object]:
    stub = channel.unary_unary(services.NEW_MESH_CERT.path)

    def call() -> object:
        try:
            return stub(b"\xff\xff\xff", timeout=10)
        except grpc.RpcError as error:
            return error.code()

    return call


def main(calls: int) -> None:
    # The plain server logs a traceback per refused call; silenced, so it costs the baseline less.
    logging.getLogger("grpc").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as directory:
        coordinator = Coordinator(History(MemoryStore()), verifier_for=workload_verifier)
        identity = TlsIdentity.generate(now=utc_now())
        issuer = EmulatedSnpIssuer(EmulatedSnp(Path(directory)), bytes(32))
        guarded = CoordinatorServer(
            coordinator, issuer, identity, host="127.0.0.1", ports=Ports(0, 0, 0)
        )
        guarded.start()
        plain = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        plain.add_generic_rpc_handlers([services.mesh_api_handler(MeshApi(coordinator, issuer))])
        credentials = grpc.ssl_server_credentials([(identity.key_pem, identity.certificate_pem)])
        plain_port = plain.add_secure_port("127.0.0.1:0", credentials)
        plain.start()
        channels = {}
        for name, port in (("interceptor", guarded.ports.mesh_api), ("plain", plain_port)):
            target = f"127.0.0.1:{port}"
            channels[name] = pinned_channel(target, fetch_certificate(target))
        try:
            results: dict[str, list[float]] = {"interceptor": [], "plain": []}
            refusals: dict[str, list[float]] = {"interceptor": [], "plain": []}
            for _ in range(5):  # interleaved rounds, so both see the same machine load
                for name, channel in channels.items():
                    nonce = channel.unary_unary(services.GET_NONCE.path)
                    results[name].append(p50_ms(lambda nonce=nonce: nonce(b"", timeout=10), calls))
                    refusals[name].append(p50_ms(refused(channel), calls // 4))
        finally:
            for channel in channels.values():
                channel.close()
            guarded.stop(grace=0)
            plain.stop(0)
    nonce_ratio = min(results["interceptor"]) / min(results["plain"])
    refusal_ratio = min(refusals["interceptor"]) / min(refusals["plain"])
    print(
        f"GetNonce p50: {min(results['interceptor']):.3f} ms with the interceptor,"
        f" {min(results['plain']):.3f} ms without (ratio {nonce_ratio:.2f})"
    )
    print(
        f"refused call p50: {min(refusals['interceptor']):.3f} ms with (INVALID_ARGUMENT),"
        f" {min(refusals['plain']):.3f} ms without (gRPC's INTERNAL, traceback not written)"
        f" (ratio {refusal_ratio:.2f})"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
