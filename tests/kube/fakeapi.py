"""A Kubernetes API server that fails on purpose: fault injection, what the real one cannot do.

Everything the ConfigMap history relies on when the API works (409 on a stale `resourceVersion`,
AlreadyExists, 404, the 1 MiB limit, RBAC) is tested on the real API server of the test cluster
(`tests/kube/cluster.py`). What a healthy API server never does on request is here: answer every
call with a server error (500, 503 with the bodies the real server sends for them), or accept the
connection and never answer. The official client's own request and error handling run unchanged
against it, over plain HTTP on loopback.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# `status` for a server that accepts a request and never answers it.
SILENT = 0


@dataclass
class FaultyApiServer:
    """Where it listens, and the requests it saw (method and path), to show they were sent."""

    host: str = ""
    requests: list[tuple[str, str]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def _handler(state: FaultyApiServer, status: int, reason: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _fail(self) -> None:
            state.requests.append((self.command, self.path))
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if status == SILENT:
                state.release.wait()
                return
            body = json.dumps(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                 "message": f"injected fault: {reason}", "reason": reason, "code": status}
            ).encode()  # fmt: skip
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._fail()

        def do_POST(self) -> None:
            self._fail()

        def do_PUT(self) -> None:
            self._fail()

        def do_DELETE(self) -> None:
            self._fail()

    return Handler


@contextmanager
def failing(status: int, reason: str = "InternalError") -> Iterator[FaultyApiServer]:
    """A server on an ephemeral loopback port answering every request with `status` (or, with
    `SILENT`, never answering), stopped on exit."""
    state = FaultyApiServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state, status, reason))
    server.daemon_threads = True
    state.host = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()


def write_kubeconfig(path: Path, host: str) -> Path:
    """A kubeconfig that points the official client at `host` (plain HTTP, no credentials)."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": host}}],
                "users": [{"name": "nobody", "user": {}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "nobody"}}],
                "current-context": "fake",
            }
        )
    )
    return path
