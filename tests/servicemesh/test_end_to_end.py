"""Real Envoy sidecars on loopback with certificates from a real Coordinator.

client app → client's egress sidecar → server's ingress sidecar → server app, all over mutual TLS
between the sidecars; an outsider without a mesh certificate is refused; `openssl s_client` with
the mesh CA verifies the ingress. The local (no iptables) ingress stands in for TPROXY.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from contrast.atls.issuers import EmulatedSnpIssuer, TeeKind
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.client import operations
from contrast.client.workspace import Workspace
from contrast.initializer.client import obtain_mesh_certificate
from contrast.local import app
from contrast.local.processes import Processes, free_port, wait_for_port
from contrast.local.workspace import emulated_reference_values, write_workspace
from contrast.servicemesh import iptables
from contrast.servicemesh.annotations import parse_ingress
from contrast.servicemesh.sidecar import EGRESS_ENV
from tests.cli.conftest import COORDINATOR, WEB, Cluster, DemoWorkload

ENVOY = str(Path(sys.executable).parent / "envoy")
CLIENT = DemoWorkload("client")
EGRESS_ADDRESS = "127.0.0.2"


def mesh_files(cluster: Cluster, workload: DemoWorkload, directory: Path) -> Path:
    issuer = EmulatedSnpIssuer(EmulatedSnp(cluster.tee_dir), workload.policy_hash)
    obtain_mesh_certificate(cluster.mesh_api, issuer, deadline=10).write(directory)
    return directory / "tls-config"


@dataclass(frozen=True)
class Mesh:
    egress_port: int
    web_mtls: int
    metrics_port: int
    client_tls: Path


@pytest.fixture
def mesh(cluster: Cluster, tmp_path: Path) -> Iterator[Mesh]:
    # The client is a workload of the manifest too: add it before setting the manifest.

    write_workspace(
        cluster.workspace,
        emulated_reference_values(TeeKind.EMULATED_SNP, cluster.tee_dir),
        [COORDINATOR, WEB, CLIENT],
    )
    target = operations.Target(cluster.user_api, cluster.workspace / "manifest.json")
    operations.set_manifest(target, Workspace(cluster.workspace), cluster.workspace / "resources")
    web_tls = mesh_files(cluster, WEB, tmp_path / "web")
    client_tls = mesh_files(cluster, CLIENT, tmp_path / "client")

    app_port, metrics_port = free_port(), free_port()
    servers = []
    for port, name in ((app_port, "web"), (metrics_port, "metrics")):
        server = ThreadingHTTPServer(("127.0.0.1", port), app.handler(name))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)

    processes = Processes(tmp_path / "logs")
    web_mtls, egress_port = free_port(), free_port()
    sidecars = (
        ("web", web_tls, app_port, web_mtls, {}),
        ("client", client_tls, free_port(), free_port(),
         {EGRESS_ENV: f"web#{EGRESS_ADDRESS}:{egress_port}#127.0.0.1:{web_mtls}"}),
    )  # fmt: skip
    for name, tls, upstream, mtls_port, env in sidecars:
        process = processes.start(
            f"sidecar-{name}",
            ["-m", "contrast", "servicemesh", "run", "--envoy", ENVOY, "--tls-dir", str(tls),
             "--config-path", str(tmp_path / f"{name}.json"), "--local-upstream", str(upstream),
             "--mtls-port", str(mtls_port), "--tls-port", str(free_port())],
            env={**env, "CONTRAST_LOG_FORMAT": "text"},
        )  # fmt: skip
        wait_for_port(mtls_port, timeout=30, process=process)
    wait_for_port(egress_port, timeout=30, host=EGRESS_ADDRESS)
    yield Mesh(egress_port, web_mtls, metrics_port, client_tls)
    processes.stop_all()
    for server in servers:
        server.shutdown()
        server.server_close()


def test_request_crosses_the_mesh(mesh: Mesh) -> None:
    answer = app.request(EGRESS_ADDRESS, mesh.egress_port)
    assert answer == "HTTP 200: hello from web"


def test_a_client_without_a_mesh_certificate_is_refused(mesh: Mesh) -> None:
    answer = app.probe_without_certificate(mesh.client_tls / "mesh-ca.pem", mesh.web_mtls, "web")
    assert answer.startswith("refused")


def test_plain_text_is_not_accepted_by_the_mesh_but_exempt_ports_answer(mesh: Mesh) -> None:
    # The ingress speaks TLS only: a plain HTTP request gets no HTTP answer.
    with pytest.raises((OSError, http.client.HTTPException)):
        app.request("127.0.0.1", mesh.web_mtls)
    # metrics#8080#true: the port is not redirected (iptables RETURN), the app answers plainly.
    rules = iptables.rules(parse_ingress("metrics#8080#true"))
    assert "-A CONTRAST_INBOUND -p tcp --dport 8080 -j RETURN" in rules
    assert app.request("127.0.0.1", mesh.metrics_port) == "HTTP 200: hello from metrics"


def test_openssl_verifies_the_ingress_with_the_mesh_ca(mesh: Mesh) -> None:
    client_tls = mesh.client_tls
    result = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{mesh.web_mtls}",
         "-CAfile", str(client_tls / "mesh-ca.pem"), "-cert", str(client_tls / "certChain.pem"),
         "-key", str(client_tls / "key.pem"), "-verify_return_error", "-servername", "web"],
        input="", capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert "Verify return code: 0 (ok)" in result.stdout, result.stdout + result.stderr
