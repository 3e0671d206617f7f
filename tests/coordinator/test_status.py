"""Every answer of the Coordinator's gRPC server is a status chosen on purpose (issue 11).

The server runs in this process on loopback, with its log formatted as the program formats it, so
the tests see both what a caller gets and what the operator's log gets.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from contrast import logs
from contrast.api import meshapi_pb2, services, userapi_pb2
from contrast.api.convert import evidence_to_proto
from contrast.api.services import MeshApiClient
from contrast.atls.client import fetch_certificate, pinned_channel
from contrast.atls.identity import TlsIdentity
from contrast.atls.reportdata import public_key_der, report_data
from contrast.coordinator.core import Coordinator, utc_now
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.history.history import History
from contrast.history.store import FileSystemStore
from contrast.manifest.model import Manifest
from tests.coordinator.conftest import Deployment


@dataclass
class Running:
    """A server, a channel to each of its APIs, and its log."""

    server: CoordinatorServer
    user: grpc.Channel
    mesh: grpc.Channel
    log: io.StringIO

    def call(self, method: services.Method[Any, Any], payload: bytes) -> grpc.RpcError | bytes:
        """Send raw request bytes; the answer's bytes, or the error."""
        channel = self.mesh if method.service == services.MESH_API else self.user
        try:
            answer: bytes = channel.unary_unary(method.path)(payload, timeout=10)
        except grpc.RpcError as error:
            return error
        return answer

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.getvalue().splitlines()]

    def close(self) -> None:
        self.user.close()
        self.mesh.close()
        self.server.stop(grace=0)


@contextlib.contextmanager
def captured_log(*, json_lines: bool) -> Iterator[io.StringIO]:
    """The process's log as `contrast coordinator` writes it, here into a buffer."""
    buffer = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    contrast_logger = logging.getLogger("contrast")
    saved_contrast = contrast_logger.handlers[:], contrast_logger.level, contrast_logger.propagate
    logs.configure(json_lines=json_lines, stream=buffer)
    try:
        yield buffer
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        contrast_logger.handlers[:] = saved_contrast[0]
        contrast_logger.setLevel(saved_contrast[1])
        contrast_logger.propagate = saved_contrast[2]


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The log as JSON lines, `contrast coordinator`'s default."""
    with captured_log(json_lines=True) as buffer:
        yield buffer


def start(deployment: Deployment, coordinator: Coordinator, log: io.StringIO) -> Running:
    server = CoordinatorServer(
        coordinator,
        deployment.issuer("coordinator"),
        TlsIdentity.generate(now=utc_now()),
        host="127.0.0.1",
        ports=Ports(0, 0, 0),
    )
    server.start()
    user, mesh = (
        pinned_channel(target, fetch_certificate(target))
        for target in (f"127.0.0.1:{server.ports.user_api}", f"127.0.0.1:{server.ports.mesh_api}")
    )
    return Running(server, user, mesh, log)


@pytest.fixture
def serve(deployment: Deployment, json_log: io.StringIO) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def run(coordinator: Coordinator | None = None) -> Running:
        running = start(deployment, coordinator or deployment.coordinator(), json_log)
        started.append(running)
        return running

    yield run
    for running in started:
        running.close()


def faulty_verifier_for(manifest: Manifest) -> Any:
    raise RuntimeError("the secret detail of a bug")


def with_a_bug(deployment: Deployment, serve: Callable[..., Running]) -> tuple[Running, bytes]:
    """A server whose SetManifest hits a bug, and a SetManifest request that reaches it."""
    coordinator = Coordinator(
        History(FileSystemStore(deployment.state_dir)), verifier_for=faulty_verifier_for
    )
    request = userapi_pb2.SetManifestRequest(
        Manifest=deployment.manifest(), Policies=deployment.documents()
    )
    return serve(coordinator), request.SerializeToString()


def test_an_unexpected_error_is_internal_with_an_incident_and_one_json_line(
    deployment: Deployment, serve: Callable[..., Running]
) -> None:
    running, request = with_a_bug(deployment, serve)
    error = running.call(services.SET_MANIFEST, request)
    assert isinstance(error, grpc.RpcError)
    assert error.code() == grpc.StatusCode.INTERNAL
    details = error.details() or ""
    assert "secret detail" not in details
    assert "RuntimeError" not in details
    assert details.startswith("internal error (incident ")
    incident = details.removeprefix("internal error (incident ").removesuffix(")")
    lines = running.log_lines()
    failures = [line for line in lines if line.get("incident") == incident]
    assert len(failures) == 1, lines
    [failure] = failures
    assert failure["level"] == "error"
    assert failure["method"] == "SetManifest"
    assert failure["exception"]["type"] == "RuntimeError"
    assert any("faulty_verifier_for" in frame for frame in failure["exception"]["where"])


class FaultyVerifier:
    """A manifest's evidence verifier with a bug: every check raises."""

    def verify(self, evidence: Any, *, report_data: bytes, now: Any) -> Any:
        raise KeyError("tcb_version")


@pytest.mark.parametrize("json_lines", [True, False], ids=["json", "text"])
def test_an_internal_error_of_new_mesh_cert_names_its_cause_in_the_log_message(
    deployment: Deployment, json_lines: bool
) -> None:
    """The line's message itself says what failed (type and message), so a text log and a
    reader of `message` alone see it; the caller still gets only the incident."""
    coordinator = Coordinator(
        History(FileSystemStore(deployment.state_dir)), verifier_for=lambda _: FaultyVerifier()
    )
    coordinator.set_manifest(deployment.manifest(), deployment.documents())
    with captured_log(json_lines=json_lines) as log:
        running = start(deployment, coordinator, log)
        try:
            api = MeshApiClient(running.mesh, timeout=10)
            nonce = api.get_nonce()
            public_key = public_key_der(ec.generate_private_key(ec.SECP256R1()).public_key())
            evidence = deployment.issuer("web").issue(report_data(public_key, nonce))
            with pytest.raises(grpc.RpcError) as failed:
                api.new_mesh_cert(
                    meshapi_pb2.NewMeshCertRequest(
                        Nonce=nonce, PublicKey=public_key, Evidence=evidence_to_proto(evidence)
                    )
                )
        finally:
            running.close()
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    details = failed.value.details() or ""
    assert "tcb_version" not in details
    incident = details.removeprefix("internal error (incident ").removesuffix(")")
    [line] = [line for line in log.getvalue().splitlines() if incident in line]
    message = json.loads(line)["message"] if json_lines else line
    assert message.endswith(
        f"NewMeshCert failed with an internal error (incident {incident}): KeyError: 'tcb_version'"
    )


def test_repeats_of_one_failure_are_counted_not_logged(
    deployment: Deployment, serve: Callable[..., Running]
) -> None:
    running, request = with_a_bug(deployment, serve)
    for _ in range(30):
        error = running.call(services.SET_MANIFEST, request)
        assert isinstance(error, grpc.RpcError)
        assert error.code() == grpc.StatusCode.INTERNAL
    errors = [line for line in running.log_lines() if line["level"] == "error"]
    assert len(errors) == 1
    metrics = running.server.coordinator.metrics.registry
    handled = metrics.get_sample_value(
        "grpc_server_handled_total",
        {
            "grpc_code": "INTERNAL",
            "grpc_method": "SetManifest",
            "grpc_service": services.USER_API,
            "grpc_type": "unary",
        },
    )
    assert handled == 30


@pytest.mark.parametrize("method", services.METHODS, ids=lambda method: method.name)
def test_bytes_that_are_not_the_request_message_are_invalid_argument(
    serve: Callable[..., Running], method: services.Method[Any, Any]
) -> None:
    running = serve()
    error = running.call(method, b"\xff\xff\xff")
    assert isinstance(error, grpc.RpcError)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert f"not a {method.request.DESCRIPTOR.full_name} message" in (error.details() or "")
    assert all(line["level"] != "error" for line in running.log_lines())


def test_a_recover_seed_longer_than_the_key_derivation_allows_is_invalid_argument(
    deployment: Deployment, serve: Callable[..., Running]
) -> None:
    first = deployment.coordinator()
    first.set_manifest(deployment.manifest(), deployment.documents())
    running = serve()  # a restart: recovery mode
    request = userapi_pb2.RecoverRequest(Seed=b"s" * 8161, Salt=b"s" * 32)
    error = running.call(services.RECOVER, request.SerializeToString())
    assert isinstance(error, grpc.RpcError)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "at most 8160 bytes" in (error.details() or "")


def test_a_truncated_history_head_is_data_loss(
    deployment: Deployment, serve: Callable[..., Running]
) -> None:
    first = deployment.coordinator()
    result = first.set_manifest(deployment.manifest(), deployment.documents())
    assert result.seed_shares is not None
    head = deployment.state_dir / "transitions" / "latest"
    head.write_bytes(head.read_bytes()[:20])
    running = serve()
    seed = result.seed_shares.decrypt(deployment.seedshare)
    request = userapi_pb2.RecoverRequest(Seed=seed, Salt=result.seed_shares.salt)
    error = running.call(services.RECOVER, request.SerializeToString())
    assert isinstance(error, grpc.RpcError)
    assert error.code() == grpc.StatusCode.DATA_LOSS, error.details()
    assert "transitions/latest" in (error.details() or "")


def test_a_failed_http_exchange_is_one_log_line_not_a_traceback(
    deployment: Deployment, serve: Callable[..., Running], capsys: pytest.CaptureFixture[str]
) -> None:
    running = serve()
    http = running.server._http
    for _ in range(3):
        try:
            raise BrokenPipeError("the client went away")
        except BrokenPipeError:
            http.handle_error(None, ("192.0.2.1", 40000))
    assert "Traceback" not in capsys.readouterr().err
    [line] = [line for line in running.log_lines() if line["message"].startswith("HTTP")]
    assert line["message"] == "HTTP exchange with 192.0.2.1 failed"
    assert line["exception"]["type"] == "BrokenPipeError"
