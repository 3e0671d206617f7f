"""The Coordinator's network face: gRPC UserAPI and MeshAPI over TLS, metrics and probes over HTTP.

Each servicer method turns a request into a call on `Coordinator` and raises what it raises;
`contrast.coordinator.status` turns every failure into a deliberate gRPC status (one place for
the whole mapping), so no internal detail (or secret) reaches a caller.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from contrast.api import meshapi_pb2, services, userapi_pb2
from contrast.api.convert import evidence_from_proto, evidence_to_proto, seed_shares_to_proto
from contrast.api.wire import ManifestsResponse, SetManifest
from contrast.atls.identity import TlsIdentity
from contrast.atls.peer import Issuer
from contrast.atls.reportdata import NONCE_SIZE, report_data
from contrast.attestation.errors import AttestationError
from contrast.coordinator import handover
from contrast.coordinator.core import Coordinator, Mode
from contrast.coordinator.errors import CoordinatorPackageError, InvalidRequest
from contrast.coordinator.status import DeliberateStatus
from contrast.logs import LogThrottle, describe_exception

log = logging.getLogger(__name__)


class UserApi:
    def __init__(self, coordinator: Coordinator, identity: TlsIdentity, issuer: Issuer) -> None:
        self._coordinator = coordinator
        self._identity = identity
        self._issuer = issuer

    def attest(
        self, request: userapi_pb2.AttestRequest, context: grpc.ServicerContext
    ) -> userapi_pb2.AttestResponse:
        if len(request.Nonce) != NONCE_SIZE:
            raise InvalidRequest(f"the nonce must be {NONCE_SIZE} bytes")
        evidence = self._issuer.issue(report_data(self._identity.public_key_der, request.Nonce))
        return userapi_pb2.AttestResponse(Evidence=evidence_to_proto(evidence))

    def set_manifest(
        self, request: SetManifest, context: grpc.ServicerContext
    ) -> userapi_pb2.SetManifestResponse:
        result = self._coordinator.set_manifest(
            request.manifest,
            request.policies,
            previous_transition_hash=request.previous_transition_hash,
            owner_public_key=request.workload_owner_public_key,
            signature=request.signature,
        )
        log.info("manifest set (generation %s)", self._coordinator.generation)
        response = userapi_pb2.SetManifestResponse(RootCA=result.root_ca, MeshCA=result.mesh_ca)
        if result.seed_shares is not None:
            response.SeedSharesDoc.CopyFrom(seed_shares_to_proto(result.seed_shares))
        return response

    def get_manifests(
        self, request: userapi_pb2.GetManifestsRequest, context: grpc.ServicerContext
    ) -> ManifestsResponse:
        history = self._coordinator.get_manifests(
            since=request.Since, policies=not request.WithoutPolicies
        )
        return ManifestsResponse(
            manifests=history.manifests,
            policies=history.policies,
            root_ca=history.root_ca,
            mesh_ca=history.mesh_ca,
            transition_hash=history.latest.transition_hash,
            signature=history.latest.signature,
            previous_transition_hash=history.previous_transition_hash,
            generation=history.generation,
        )

    def recover(
        self, request: userapi_pb2.RecoverRequest, context: grpc.ServicerContext
    ) -> userapi_pb2.RecoverResponse:
        self._coordinator.recover(
            request.Seed,
            request.Salt,
            expected_transition_hash=request.ExpectedTransitionHash,
        )
        log.info("recovered from a seed share")
        return userapi_pb2.RecoverResponse()


class MeshApi:
    def __init__(self, coordinator: Coordinator, issuer: Issuer) -> None:
        self._coordinator = coordinator
        self._issuer = issuer

    def get_nonce(
        self, request: meshapi_pb2.GetNonceRequest, context: grpc.ServicerContext
    ) -> meshapi_pb2.GetNonceResponse:
        return meshapi_pb2.GetNonceResponse(Nonce=self._coordinator.new_nonce())

    def new_mesh_cert(
        self, request: meshapi_pb2.NewMeshCertRequest, context: grpc.ServicerContext
    ) -> meshapi_pb2.NewMeshCertResponse:
        try:
            evidence = evidence_from_proto(request.Evidence)
        except AttestationError:
            self._coordinator.metrics.attestation_failures.inc()
            raise
        certificate = self._coordinator.new_mesh_certificate(
            request.Nonce, request.PublicKey, evidence
        )
        if log.isEnabledFor(logging.DEBUG):  # the peer's address costs gRPC a lookup per call
            log.debug("issued a mesh certificate to %s", context.peer())
        return meshapi_pb2.NewMeshCertResponse(
            MeshCACert=certificate.mesh_ca,
            CertChain=certificate.cert_chain,
            RootCACert=certificate.root_ca,
            WorkloadSecret=certificate.workload_secret or b"",
        )

    def recover(
        self, request: meshapi_pb2.RecoverRequest, context: grpc.ServicerContext
    ) -> meshapi_pb2.RecoverResponse:
        """Peer recovery: the handover, sealed to the requester's key, with our evidence."""
        if len(request.RequesterNonce) != NONCE_SIZE:
            raise InvalidRequest(f"the requester nonce must be {NONCE_SIZE} bytes")
        recipient = handover.recipient_key(request.PublicKey)
        try:
            evidence = evidence_from_proto(request.Evidence)
        except AttestationError:
            self._coordinator.metrics.attestation_failures.inc()
            raise
        secret = self._coordinator.handover(request.Nonce, request.PublicKey, evidence)
        sealed = handover.seal(secret, recipient, request.Nonce)
        proof = self._issuer.issue(report_data(sealed, request.RequesterNonce))
        log.info("handed the seed to an attested peer Coordinator at %s", context.peer())
        return meshapi_pb2.RecoverResponse(Sealed=sealed, Evidence=evidence_to_proto(proof))


class CannotListen(CoordinatorPackageError):
    """An address the Coordinator should serve on is taken or not ours."""


def _listen(server: grpc.Server, address: str, credentials: grpc.ServerCredentials) -> int:
    try:
        return server.add_secure_port(address, credentials)
    except RuntimeError:  # gRPC's only word for it: "Failed to bind to address"
        raise CannotListen(
            f"cannot listen on {address}", hint="is another process using the port?"
        ) from None


def mesh_api_server(
    coordinator: Coordinator, issuer: Issuer, identity: TlsIdentity, address: str
) -> tuple[grpc.Server, int]:
    """The mesh API's gRPC server on `address` (not started), and the port it got.

    gRPC sets SO_REUSEPORT on its sockets, so worker processes (`contrast.coordinator.workers`)
    can listen on the same port with the same identity, and the kernel spreads the connections.
    """
    credentials = grpc.ssl_server_credentials([(identity.key_pem, identity.certificate_pem)])
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        interceptors=[DeliberateStatus(coordinator.metrics)],
    )
    server.add_generic_rpc_handlers([services.mesh_api_handler(MeshApi(coordinator, issuer))])
    return server, _listen(server, address, credentials)


@dataclass(frozen=True)
class Ports:
    user_api: int
    mesh_api: int
    http: int


class CoordinatorServer:
    """Both gRPC servers and the HTTP endpoint, started and stopped together."""

    def __init__(
        self,
        coordinator: Coordinator,
        issuer: Issuer,
        identity: TlsIdentity,
        *,
        host: str = "0.0.0.0",  # noqa: S104 - the Coordinator serves the cluster
        ports: Ports = Ports(1313, 7777, 9102),
        started: Callable[[], bool] = lambda: True,
    ) -> None:
        """`started` is the start-up probe: with peers, true once one peer recovery was tried."""
        self.coordinator = coordinator
        credentials = grpc.ssl_server_credentials([(identity.key_pem, identity.certificate_pem)])
        interceptors: list[grpc.ServerInterceptor] = [DeliberateStatus(coordinator.metrics)]
        self._user = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8),
            interceptors=interceptors,
            options=services.USER_API_MESSAGE_OPTIONS,  # manifests of 10 000 policies
        )
        self._user.add_generic_rpc_handlers(
            [services.user_api_handler(UserApi(coordinator, identity, issuer))]
        )
        user_port = _listen(self._user, f"{host}:{ports.user_api}", credentials)
        self._mesh, mesh_port = mesh_api_server(
            coordinator, issuer, identity, f"{host}:{ports.mesh_api}"
        )
        try:
            self._http = _HttpServer((host, ports.http), _http_handler(coordinator, started))
        except OSError as error:
            raise CannotListen(f"cannot listen on {host}:{ports.http}: {error.strerror}") from None
        self.ports = Ports(user_port, mesh_port, self._http.server_address[1])

    def start(self) -> None:
        self._user.start()
        self._mesh.start()
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def stop(self, grace: float = 2.0) -> None:
        self._user.stop(grace).wait()
        self._mesh.stop(grace).wait()
        self._http.shutdown()
        self._http.server_close()

    def wait(self) -> None:
        self._user.wait_for_termination()


class _HttpServer(ThreadingHTTPServer):
    """Metrics and probes; a failed exchange is one throttled log line, not a traceback."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._throttle = LogThrottle()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints the traceback to stderr; any client could fill the log with them.
        error = sys.exc_info()[1]
        if error is None:
            return
        admission = self._throttle.admit(type(error).__name__)
        if admission is not None:
            log.warning(
                "HTTP exchange with %s failed",
                client_address[0] if client_address else "?",
                extra={"fields": {"exception": describe_exception(error), **admission.fields()}},
            )


def _http_handler(
    coordinator: Coordinator, started: Callable[[], bool]
) -> type[BaseHTTPRequestHandler]:
    probes: dict[str, Callable[[], bool]] = {
        "/probe/startup": started,
        "/probe/liveness": lambda: True,
        "/probe/readiness": lambda: coordinator.mode is Mode.READY,
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._reply(200, generate_latest(coordinator.metrics.registry), CONTENT_TYPE_LATEST)
            elif self.path in probes:
                healthy = probes[self.path]()
                body = f"{coordinator.mode}\n".encode()
                self._reply(200 if healthy else 503, body, "text/plain")
            else:
                self._reply(404, b"not found\n", "text/plain")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http: " + format, *args)

    return Handler
