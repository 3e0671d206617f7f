"""Mesh API worker processes on the Coordinator's port (`contrast.coordinator.workers`, issue 29).

The workers are real processes of `python -m contrast.coordinator.workers` on the file history;
the Coordinator that hands them its state runs in the test's process (or as a program, for its
death), so the tests can update its manifest between two certificates.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.api import meshapi_pb2, services, userapi_pb2
from contrast.api.convert import evidence_to_proto
from contrast.api.services import MeshApiClient, UserApiClient
from contrast.atls.client import fetch_certificate, pinned_channel
from contrast.atls.identity import TlsIdentity
from contrast.atls.reportdata import public_key_der, report_data
from contrast.coordinator.core import Coordinator, utc_now
from contrast.coordinator.metrics import CoordinatorMetrics, CounterKey
from contrast.coordinator.workers import REPORT_INTERVAL, MeshWorkers, WorkerConfig, WorkerReport
from tests.coordinator.conftest import Deployment, policy_hash
from tests.coordinator.program import CoordinatorProcess, command

WORKERS = 2
CONNECTIONS = 12


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Workers:
    coordinator: Coordinator
    workers: MeshWorkers
    port: int


@pytest.fixture
def workers(deployment: Deployment, tee_dir: Path) -> Iterator[Workers]:
    """Two workers for a Coordinator in this process; nothing else listens on their port."""
    coordinator = deployment.coordinator()
    port = free_port()
    config = WorkerConfig(
        history="files",
        state_dir=str(deployment.state_dir),
        namespace=None,
        kubeconfig=None,
        tee="emulated-snp",
        tee_state=str(tee_dir),
        policy_hash=policy_hash(deployment.policies["coordinator"]).hex(),
        host="127.0.0.1",
        mesh_port=port,
        json_lines=True,
    )
    started = MeshWorkers(coordinator, TlsIdentity.generate(now=utc_now()), config, WORKERS)
    started.start()
    yield Workers(coordinator, started, port)
    started.stop()


def certificate(
    deployment: Deployment, channel: grpc.Channel, name: str
) -> meshapi_pb2.NewMeshCertResponse:
    """GetNonce and NewMeshCert on one channel, with evidence of workload `name`."""
    api = MeshApiClient(channel, timeout=20)
    nonce = api.get_nonce()
    public_key = public_key_der(ec.generate_private_key(ec.SECP256R1()).public_key())
    evidence = deployment.issuer(name).issue(report_data(public_key, nonce))
    return api.new_mesh_cert(
        meshapi_pb2.NewMeshCertRequest(
            Nonce=nonce, PublicKey=public_key, Evidence=evidence_to_proto(evidence)
        )
    )


def issued_by(response: meshapi_pb2.NewMeshCertResponse, mesh_ca: bytes) -> bool:
    leaf = x509.load_pem_x509_certificate(response.CertChain)
    authority = x509.load_pem_x509_certificate(mesh_ca)
    try:
        leaf.verify_directly_issued_by(authority)
    except (ValueError, InvalidSignature):  # another issuer's name, or not its signature
        return False
    return True


def channels(port: int, count: int) -> list[grpc.Channel]:
    """`count` channels, each its own connection (a connection is given to one process)."""
    target = f"127.0.0.1:{port}"
    certificate_pem = fetch_certificate(target)
    # A local subchannel pool: gRPC would otherwise share one connection between the channels.
    return [
        pinned_channel(target, certificate_pem, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(count)
    ]


def serving_processes(pids: list[int]) -> dict[int, float]:
    """CPU seconds so far of each of `pids` (to see which ones did the work)."""
    ticks = os.sysconf("SC_CLK_TCK")
    spent = {}
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        spent[pid] = (int(fields[11]) + int(fields[12])) / ticks
    return spent


def refused_connection(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_workers_start_once_the_coordinator_is_ready_and_share_the_port(
    deployment: Deployment, workers: Workers
) -> None:
    time.sleep(1.5)  # three looks at a Coordinator without a manifest
    assert workers.workers.pids == []
    assert refused_connection(workers.port)
    workers.coordinator.set_manifest(deployment.manifest(), deployment.documents())
    assert workers.workers.wait_serving(timeout=120)
    pids = workers.workers.pids
    assert len(pids) == WORKERS
    mesh_ca = workers.coordinator.get_manifests().mesh_ca
    before = serving_processes(pids)
    for channel in channels(workers.port, CONNECTIONS):
        for _ in range(3):
            assert issued_by(certificate(deployment, channel, "web"), mesh_ca)
        channel.close()
    after = serving_processes(pids)
    # 36 certificates over 12 connections: each worker took some (the kernel spreads them).
    assert all(after[pid] - before[pid] > 0.01 for pid in pids), (before, after)


def test_no_worker_certifies_against_a_superseded_manifest(
    deployment: Deployment, workers: Workers
) -> None:
    workers.coordinator.set_manifest(deployment.manifest(), deployment.documents())
    assert workers.workers.wait_serving(timeout=120)
    old_ca = workers.coordinator.get_manifests().mesh_ca
    kept = channels(workers.port, CONNECTIONS)
    for channel in kept:  # connections open on every worker, each with a certificate
        assert issued_by(certificate(deployment, channel, "web"), old_ca)
    # The update drops "web"; the workers learn of it only through the history.
    deployment.update(workers.coordinator, ("coordinator",))
    new_ca = workers.coordinator.get_manifests().mesh_ca
    assert new_ca != old_ca
    for channel in kept + channels(workers.port, CONNECTIONS):
        with pytest.raises(grpc.RpcError) as refused:
            certificate(deployment, channel, "web")
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "not in the active manifest" in (refused.value.details() or "")
        issued = certificate(deployment, channel, "coordinator")
        assert issued.MeshCACert == new_ca
        assert issued_by(issued, new_ca)
        assert not issued_by(issued, old_ca)
        channel.close()


def test_a_killed_worker_is_started_again_and_all_stop_with_the_coordinator(
    deployment: Deployment, workers: Workers
) -> None:
    workers.coordinator.set_manifest(deployment.manifest(), deployment.documents())
    assert workers.workers.wait_serving(timeout=120)
    killed = workers.workers.pids[0]
    os.kill(killed, signal.SIGKILL)
    assert workers.workers.wait_serving(timeout=120, count=1)  # the one started again
    assert killed not in workers.workers.pids
    assert len(workers.workers.pids) == WORKERS
    [channel] = channels(workers.port, 1)
    mesh_ca = workers.coordinator.get_manifests().mesh_ca
    assert issued_by(certificate(deployment, channel, "web"), mesh_ca)
    channel.close()
    pids = workers.workers.pids
    workers.workers.stop()
    assert all(not alive(pid) for pid in pids)
    assert refused_connection(workers.port)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_workers_of_a_coordinator_killed_with_sigkill_exit(
    deployment: Deployment, tee_dir: Path
) -> None:
    program = CoordinatorProcess.start(
        deployment.state_dir,
        tee_dir,
        policy_hash(deployment.policies["coordinator"]),
        ["--mesh-workers", "1"],
    )
    try:
        target = f"127.0.0.1:{program.user_api}"
        UserApiClient(pinned_channel(target, fetch_certificate(target))).set_manifest(
            userapi_pb2.SetManifestRequest(
                Manifest=deployment.manifest(), Policies=deployment.documents()
            )
        )
        deadline = time.monotonic() + 120
        while not (pid := worker_pid(program.lines)):
            assert program.process.poll() is None, b"".join(program.lines)
            assert time.monotonic() < deadline, b"".join(program.lines)
            time.sleep(0.2)
        assert program.call(services.GET_NONCE, b"") == grpc.StatusCode.OK
        program.process.send_signal(signal.SIGKILL)
        program.process.wait()
        deadline = time.monotonic() + 30
        while alive(pid):
            assert time.monotonic() < deadline, "the worker outlived its Coordinator"
            time.sleep(0.2)
    finally:
        program.stop()


def worker_pid(lines: list[bytes]) -> int | None:
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        message = str(record.get("message", ""))
        if message.startswith("mesh API worker ") and "serving" in message:
            return int(message.split()[3])
    return None


ISSUED: CounterKey = ("contrast_meshapi_certificates_issued", ())
REFUSED_NONCES: CounterKey = (
    "grpc_server_handled",
    (
        ("grpc_code", "PERMISSION_DENIED"),
        ("grpc_method", "NewMeshCert"),
        ("grpc_service", services.MESH_API),
        ("grpc_type", "unary"),
    ),
)
# How long the Coordinator's counters may take to show a worker's: a bound on waiting.
REPORTED_WITHIN = 20.0


def counted(metrics: CoordinatorMetrics, key: CounterKey, wanted: float) -> float:
    """The counter `key` of `metrics` once it reaches `wanted` (or the bound passes), and after
    two more report intervals, so that a count beyond `wanted` shows too."""
    deadline = time.monotonic() + REPORTED_WITHIN
    while metrics.counter_values().get(key, 0.0) < wanted and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2 * REPORT_INTERVAL)
    return metrics.counter_values().get(key, 0.0)


def test_the_coordinators_counters_count_what_its_workers_did(
    deployment: Deployment, workers: Workers
) -> None:
    """Only the workers listen on the port, so every certificate and refusal is a worker's; the
    Coordinator's counters (its /metrics) show each once, and keep a killed worker's."""
    workers.coordinator.set_manifest(deployment.manifest(), deployment.documents())
    assert workers.workers.wait_serving(timeout=120)
    metrics = workers.coordinator.metrics
    assert metrics.counter_values().get(ISSUED, 0.0) == 0.0
    for channel in channels(workers.port, CONNECTIONS):
        for _ in range(2):
            certificate(deployment, channel, "web")
        nonce = os.urandom(32)  # a nonce no process issued
        public_key = public_key_der(ec.generate_private_key(ec.SECP256R1()).public_key())
        evidence = deployment.issuer("web").issue(report_data(public_key, nonce))
        request = meshapi_pb2.NewMeshCertRequest(
            Nonce=nonce, PublicKey=public_key, Evidence=evidence_to_proto(evidence)
        )
        with pytest.raises(grpc.RpcError) as refused:
            MeshApiClient(channel, timeout=20).new_mesh_cert(request)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        channel.close()
    assert counted(metrics, ISSUED, 2 * CONNECTIONS) == 2 * CONNECTIONS
    assert counted(metrics, REFUSED_NONCES, CONNECTIONS) == CONNECTIONS

    # A worker killed after its report: what it counted stays, its successor counts from there.
    os.kill(workers.workers.pids[0], signal.SIGKILL)
    assert workers.workers.wait_serving(timeout=120, count=1)
    for channel in channels(workers.port, CONNECTIONS):
        certificate(deployment, channel, "web")
        channel.close()
    assert counted(metrics, ISSUED, 3 * CONNECTIONS) == 3 * CONNECTIONS


def metric(http_port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=20) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics:\n{text}")


def test_the_metrics_of_a_coordinator_with_a_mesh_worker_count_the_workers_certificates(
    deployment: Deployment, tee_dir: Path
) -> None:
    """`contrast coordinator --mesh-workers 1`: the certificates of 24 connections, which the
    kernel spreads over the Coordinator process and its worker, are all in its /metrics."""
    program = CoordinatorProcess.start(
        deployment.state_dir,
        tee_dir,
        policy_hash(deployment.policies["coordinator"]),
        ["--mesh-workers", "1"],
    )
    try:
        target = f"127.0.0.1:{program.user_api}"
        UserApiClient(pinned_channel(target, fetch_certificate(target))).set_manifest(
            userapi_pb2.SetManifestRequest(
                Manifest=deployment.manifest(), Policies=deployment.documents()
            )
        )
        deadline = time.monotonic() + 120
        while not (pid := worker_pid(program.lines)):
            assert program.process.poll() is None, b"".join(program.lines)
            assert time.monotonic() < deadline, b"".join(program.lines)
            time.sleep(0.2)
        before = serving_processes([pid, program.process.pid])
        for channel in channels(program.mesh_api, 2 * CONNECTIONS):
            certificate(deployment, channel, "web")
            channel.close()
        after = serving_processes([pid, program.process.pid])
        # The worker served some of them (a P-384 check and a signature each).
        assert after[pid] - before[pid] > 0.01, (before, after)
        name = "contrast_meshapi_certificates_issued_total"
        deadline = time.monotonic() + REPORTED_WITHIN
        while metric(program.http, name) < 2 * CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2 * REPORT_INTERVAL)
        assert metric(program.http, name) == 2 * CONNECTIONS, b"".join(program.lines)[-3000:]
    finally:
        program.stop()


@pytest.mark.parametrize(
    "line",
    [
        b"not json\n",
        b"{}\n",
        b'[["a", [], "1"]]\n',
        b'[["a", [], true]]\n',
        b'[["a", [["k"]], 1]]\n',
        b'[["a", [["k", 1]], 1]]\n',
        b'[["a", {}, 1]]\n',
        b"[[1, [], 1]]\n",
        b"\xff\n",
    ],
)
def test_a_line_that_is_not_a_report_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - ValueError is the contract; messages vary
        WorkerReport.from_line(line)


def test_a_report_reads_back_as_written() -> None:
    metrics = CoordinatorMetrics()
    metrics.mesh_certificates.inc(3)
    metrics.rpcs_handled.labels("unary", "s", "m", "OK").inc()
    report = WorkerReport(tuple(metrics.counter_values().items()))
    assert WorkerReport.from_line(report.to_line()) == report
    into = CoordinatorMetrics()
    for key, value in report.counts:
        into.add(key, value)
    assert into.counter_values() == metrics.counter_values()
    with pytest.raises(KeyError):
        into.add(("contrast_meshapi_certificates_issued", (("extra", "label"),)), 1.0)
    with pytest.raises(KeyError):
        into.add(("no_such_counter", ()), 1.0)


def test_a_negative_worker_count_is_refused_in_one_line(
    deployment: Deployment, tee_dir: Path
) -> None:
    done = subprocess.run(
        command(
            deployment.state_dir,
            tee_dir,
            policy_hash(deployment.policies["coordinator"]),
            ["--mesh-workers", "-1"],
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert "--mesh-workers must be 0 or more" in json.loads(line)["message"]
