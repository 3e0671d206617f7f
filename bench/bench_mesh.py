"""Latency and throughput of a request through two Envoy sidecars, against the same request direct.

client → client sidecar (egress, originates mutual TLS) → server sidecar (ingress, terminates it)
→ server, on loopback, one keep-alive connection; the baseline is the client talking to the server
directly in the same run. Prints p50/p99 latency, the p50 added by the mesh (goal ≤ 1 ms) and
requests per second. Run: `.venv/bin/python bench/bench_mesh.py [REQUESTS]`.
"""

from __future__ import annotations

import http.client
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding

from contrast.ca.authority import CertificateAuthority
from contrast.initializer.files import WorkloadFiles
from contrast.local.processes import Processes, free_port, wait_for_port
from contrast.servicemesh.sidecar import EGRESS_ENV

ENVOY = str(Path(sys.executable).parent / "envoy")
GOAL_MS = 1.0
BODY = b"x" * 1024


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real service would
    disable_nagle_algorithm = True  # else delayed ACKs add 40 ms to every response

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:
        return


def write_mesh_files(authority: CertificateAuthority, name: str, directory: Path) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = authority.issue_mesh_certificate(key.public_key(), [name], now=datetime.now(UTC))
    chain = leaf.public_bytes(Encoding.PEM) + authority.intermediate_pem
    WorkloadFiles(authority.mesh_ca_pem, chain, authority.root_pem, key, None).write(directory)
    return directory / "tls-config"


def measure(host: str, port: int, requests: int) -> list[float]:
    connection = http.client.HTTPConnection(host, port, timeout=10)
    latencies = []
    for _ in range(requests):
        started = time.perf_counter()
        connection.request("GET", "/")
        response = connection.getresponse()
        response.read()
        latencies.append(time.perf_counter() - started)
    connection.close()
    return latencies[len(latencies) // 10 :]  # the first tenth warms up connections and TLS


def describe(name: str, latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[int(len(ordered) * 0.99) - 1] * 1000
    rate = len(ordered) / sum(ordered)
    print(f"{name:<22} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms   {rate:8.0f} requests/s")
    return p50, p99


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    requests = int(arguments[0]) if arguments else 2000
    work = Path(tempfile.mkdtemp(prefix="bench-mesh-"))
    authority = CertificateAuthority.create(
        ec.generate_private_key(ec.SECP384R1()),
        ec.generate_private_key(ec.SECP384R1()),
        now=datetime.now(UTC),
    )
    server_tls = write_mesh_files(authority, "server", work / "server")
    client_tls = write_mesh_files(authority, "client", work / "client")
    app_port, ingress_port, egress_port = free_port(), free_port(), free_port()
    server = ThreadingHTTPServer(("127.0.0.1", app_port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    processes = Processes(work / "logs")
    try:
        for name, tls, upstream, mtls_port, env in (
            ("server", server_tls, app_port, ingress_port, {}),
            ("client", client_tls, free_port(), free_port(),
             {EGRESS_ENV: f"server#127.0.0.2:{egress_port}#127.0.0.1:{ingress_port}"}),
        ):  # fmt: skip
            process = processes.start(
                f"sidecar-{name}",
                ["-m", "contrast", "servicemesh", "run", "--envoy", ENVOY,
                 "--tls-dir", str(tls), "--config-path", str(work / f"{name}.json"),
                 "--local-upstream", str(upstream), "--mtls-port", str(mtls_port),
                 "--tls-port", str(free_port())],
                env={**env, "CONTRAST_LOG_FORMAT": "text"},
            )  # fmt: skip
            wait_for_port(mtls_port, timeout=30, process=process)
        wait_for_port(egress_port, timeout=30, host="127.0.0.2")
        direct_p50, _ = describe("direct", measure("127.0.0.1", app_port, requests))
        mesh_p50, _ = describe("through two sidecars", measure("127.0.0.2", egress_port, requests))
        added = mesh_p50 - direct_p50
        print(f"added at p50           {added:7.3f} ms   (goal <= {GOAL_MS} ms)")
    finally:
        processes.stop_all()
        server.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
