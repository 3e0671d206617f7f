"""`TransitServer.stop()` ends every open connection and waits for its thread.

Before, the handler threads were daemon threads socketserver does not track: `stop()` returned
while a kept-alive connection's thread waited for its next request, or a connection's thread for
its handshake, up to the 30 s timeout; such a thread then logged a handshake failure after the
test (and pytest's captured stream) had ended: `--- Logging error ---` in CI.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from contrast.coordinator.transit.server import TIMEOUT
from tests.coordinator.conftest import Deployment
from tests.coordinator.transit.conftest import NAMES, serve, workload


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited 10 s for {what}")
        time.sleep(0.01)


def closed(connection: socket.socket) -> bool:
    """The peer closed `connection` (end of stream, or TLS's error for an end without alert)."""
    connection.settimeout(5)
    try:
        return connection.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:  # ssl.SSLEOFError among them
        return True


def test_stop_ends_every_open_connection_and_no_thread_outlives_it(
    deployment: Deployment, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="contrast.coordinator.transit")
    coordinator = deployment.coordinator()
    coordinator.set_manifest(deployment.manifest(NAMES), deployment.documents(NAMES))
    web = workload(coordinator, deployment, "web", tmp_path)
    before = set(threading.enumerate())
    server = serve(coordinator)
    url = f"https://localhost:{server.port}/v1/transit/encrypt/{web.workload_secret_id}"
    session = requests.Session()
    silent = socket.create_connection(("127.0.0.1", server.port))
    context = ssl.create_default_context(cafile=web.mesh_ca)
    context.load_cert_chain(*web.cert)
    half = context.wrap_socket(
        socket.create_connection(("127.0.0.1", server.port)), server_hostname="localhost"
    )
    try:
        # Kept alive between requests, as Vault's client keeps it.
        sent = {"json": {"plaintext": "eA=="}, "cert": web.cert, "verify": web.mesh_ca}
        assert session.put(url, timeout=10, **sent).status_code == 200
        # Half a request: the headers and 10 of the 100 bytes of body the server waits for.
        half.sendall(
            f"PUT /v1/transit/encrypt/{web.workload_secret_id} HTTP/1.1\r\nHost: localhost\r\n"
            "Content-Length: 100\r\n\r\n0123456789".encode()
        )
        # The silent connection never sends its ClientHello: its thread waits in the handshake.
        wait_for(
            lambda: len(set(threading.enumerate()) - before) >= 4,
            "the serving thread and three connection threads",
        )
        started = time.monotonic()
        server.stop()
        took = time.monotonic() - started
        left = set(threading.enumerate()) - before
        assert not left, f"threads alive after stop(): {sorted(t.name for t in left)}"
        assert took < TIMEOUT / 3, f"stop() took {took:.1f} s: it waited for timeouts"
        # The connections the server ended are closed on the client's side too.
        assert closed(silent)
        assert closed(half)
        with pytest.raises(requests.exceptions.ConnectionError):
            session.put(url, timeout=10, **sent)
    finally:
        session.close()
        silent.close()
        half.close()
    # Failures the stop itself caused (a handshake cut short, a read ended) are not logged.
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert logged == [], logged
