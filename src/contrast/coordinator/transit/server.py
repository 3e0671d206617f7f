"""The transit engine's HTTPS server (port 8200): Vault's wire format around `TransitEngine`.

Answers are Vault's: `{"data": {...}}` with the usual envelope fields on success, `{"errors":
[message]}` with Vault's status on a refusal, so Vault's and OpenBao's `seal "transit"`, their
CLIs and clients such as hvac read them as they read Vault's. The TLS handshake runs in the
connection's own thread with a timeout, so a slow or silent client holds one thread, not the
server. `stop()` ends every connection (one in its handshake, one kept alive between requests)
and waits for their threads: none is left to answer or log once it returns.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import sys
import threading
import uuid
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography import x509

from contrast.coordinator.core import State, utc_now
from contrast.coordinator.transit.engine import TransitEngine
from contrast.coordinator.transit.errors import BadRequest, NotServing, TransitError
from contrast.coordinator.transit.tls import DEFAULT_SANS, TransitTls
from contrast.logs import LogThrottle, describe_exception

log = logging.getLogger(__name__)

PORT = 8200
# Vault's seal sends a few hundred bytes; Vault's own limit is 32 MiB, ours far less.
MAX_BODY = 1024 * 1024
# Seconds a connection may take for its handshake, or stay idle between requests.
TIMEOUT = 30.0


def envelope(data: dict[str, Any]) -> dict[str, Any]:
    """Vault's response to a logical request that returns data (no lease, no auth)."""
    return {
        "request_id": str(uuid.uuid4()),
        "lease_id": "",
        "renewable": False,
        "lease_duration": 0,
        "data": data,
        "wrap_info": None,
        "warnings": None,
        "auth": None,
    }


class TransitServer:
    """The transit engine on `host:port`, started and stopped with the Coordinator."""

    def __init__(
        self,
        active_state: Callable[[], State],
        *,
        host: str = "0.0.0.0",  # noqa: S104 - the Coordinator serves the cluster
        port: int = PORT,
        sans: tuple[str, ...] = DEFAULT_SANS,
    ) -> None:
        engine = TransitEngine(active_state)
        self._server = _HttpsServer((host, port), engine, TransitTls(sans=sans))
        self.port: int = self._server.server_address[1]
        self._serving: threading.Thread | None = None

    def start(self) -> None:
        self._serving = threading.Thread(
            target=self._server.serve_forever, name="transit", daemon=True
        )
        self._serving.start()

    def stop(self) -> None:
        """Stop accepting, end the open connections and wait for every thread of the server."""
        if self._serving is not None:
            self._server.shutdown()
            self._serving.join()
        self._server.server_close()


class _HttpsServer(ThreadingHTTPServer):
    """One thread a connection, each known with the socket that holds its descriptor.

    socketserver does not track daemon threads, so `server_close` would return with handlers
    still waiting (a kept-alive connection, a handshake) up to TIMEOUT and logging after. Here
    it shuts down each open connection's socket, which ends the handshake or the wait for the
    next request at once, and joins every thread. Failures that stopping causes are not logged.
    """

    daemon_threads = True  # a handler stuck in the engine does not hold the process at exit
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], engine: TransitEngine, tls: TransitTls) -> None:
        self.engine = engine
        self._tls = tls
        self.throttle = LogThrottle()
        self._lock = threading.Lock()
        self._stopping = False
        self._handlers: set[threading.Thread] = set()
        # Each handler thread's socket until it is closed (the raw one, then its TLS socket):
        # a thread leaves before it closes, so `server_close` never shuts down a reused fd.
        self._sockets: dict[threading.Thread, socket.socket] = {}
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=f"transit-connection {client_address[0]}:{client_address[1]}",
            daemon=True,
        )
        with self._lock:
            if self._stopping:
                super().shutdown_request(request)
                return
            self._handlers.add(thread)
            self._sockets[thread] = request
        thread.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._handlers.discard(threading.current_thread())

    def shutdown_request(self, request: Any) -> None:
        self._forget_socket()
        super().shutdown_request(request)

    def server_close(self) -> None:
        """Close the listening socket, end every open connection and join its thread."""
        super().server_close()
        with self._lock:
            self._stopping = True
            for open_socket in self._sockets.values():
                # The plain socket's shutdown, also for a TLS one: no TLS state is touched under
                # its thread, whose read or handshake just ends. OSError: it is closed already.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(open_socket, socket.SHUT_RDWR)
            threads = list(self._handlers)
        for thread in threads:
            thread.join()

    def _forget_socket(self) -> None:
        with self._lock:
            self._sockets.pop(threading.current_thread(), None)

    def _hold_socket(self, held: socket.socket) -> bool:
        """Note `held` as this thread's socket now; False if the server is stopping."""
        with self._lock:
            if threading.current_thread() in self._handlers:
                self._sockets[threading.current_thread()] = held
            return not self._stopping

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Handshake with the context of the state of this moment, then serve HTTP on it."""
        assert isinstance(request, socket.socket)
        request.settimeout(TIMEOUT)
        now = utc_now()
        not_serving = ""
        try:
            context = self._tls.serving(self.engine.state().authority, now)
        except NotServing as error:
            context = self._tls.not_serving(now)
            # A verifying client refuses the stand-in certificate and cannot read the 503: the
            # reason goes into this side's log line instead.
            not_serving = f" (not serving: {error.explain()})"
        # The TLS socket takes the descriptor over here and is noted before the handshake, so
        # `server_close` can end the handshake too.
        connection = context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        try:
            if self._hold_socket(connection):
                self._serve(connection, client_address, not_serving)
        finally:
            self._forget_socket()
            connection.close()

    def _serve(self, connection: ssl.SSLSocket, client_address: Any, not_serving: str) -> None:
        try:
            connection.do_handshake()
        except (ssl.SSLError, OSError) as error:
            if self._stopping:
                return  # the server ended it
            reason = getattr(error, "reason", None) or type(error).__name__
            admission = self.throttle.admit(("handshake", reason, not_serving))
            if admission is not None:
                log.info(
                    "transit: TLS handshake with %s refused or failed: %s%s",
                    client_address[0],
                    reason,
                    not_serving,
                    extra={"fields": admission.fields()},
                )
            return
        _Handler(connection, client_address, self)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints the traceback to stderr; any client could fill the log with them.
        error = sys.exc_info()[1]
        if error is None or self._stopping:
            return
        admission = self.throttle.admit(type(error).__name__)
        if admission is not None:
            log.warning(
                "transit: exchange with %s failed",
                client_address[0] if client_address else "?",
                extra={"fields": {"exception": describe_exception(error), **admission.fields()}},
            )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Vault's clients expect
    server: _HttpsServer

    def do_PUT(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def do_LIST(self) -> None:  # Vault's own verb for listings
        self._serve()

    def _serve(self) -> None:
        try:
            body = self._body()
            data = self.server.engine.handle(self.command, self.path, self._peer(), body)
        except TransitError as error:
            self._refused(error)
            return
        self._reply(HTTPStatus.OK, envelope(data))

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise BadRequest("send the body with a Content-Length, not chunked")
        raw = self.headers.get("Content-Length", "0")
        if not raw.isascii() or not raw.isdigit():
            self.close_connection = True
            raise BadRequest("the Content-Length is not a number")
        length = int(raw)
        if length > MAX_BODY:
            self.close_connection = True
            raise BadRequest(f"the body is larger than {MAX_BODY} bytes")
        return self.rfile.read(length)

    def _peer(self) -> x509.Certificate | None:
        assert isinstance(self.connection, ssl.SSLSocket)
        der = self.connection.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der) if der else None

    def _refused(self, error: TransitError) -> None:
        admission = self.server.throttle.admit((type(error).__name__, self.path[:128]))
        if admission is not None:
            log.warning(
                "transit: refused %s %s from %s (%d): %s",
                self.command,
                self.path[:128],
                self.client_address[0],
                error.status,
                error.explain(),
                extra={"fields": admission.fields()},
            )
        if error.status in (HTTPStatus.FORBIDDEN, HTTPStatus.SERVICE_UNAVAILABLE):
            # The connection's certificate or its absence was the problem: make the client
            # reconnect (and handshake with the state of then).
            self.close_connection = True
        self._reply(error.status, {"errors": [error.explain()]})

    def _reply(self, status: HTTPStatus, document: dict[str, Any]) -> None:
        body = json.dumps(document).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("transit: " + format, *args)
