"""A stateful fake of the Kubernetes API server's ConfigMap endpoints, on loopback.

No kube-apiserver can be installed here, so the ConfigMap history backend is tested against this:
a real HTTP server speaking the REST paths and JSON bodies that the official `kubernetes` client
sends, so the client's own request and error handling run unchanged. It keeps objects in memory
and implements exactly the semantics the backend relies on:

- one global, increasing `resourceVersion`, set on every write;
- POST of an existing name → 409 AlreadyExists; PUT with a stale `resourceVersion` → 409 Conflict
  (a PUT without one is unconditional, as the real server allows for ConfigMaps);
- GET/PUT/DELETE of a missing name → 404 NotFound;
- data + binaryData (decoded) over 1 MiB, an invalid name or data key → 422 Invalid;
- list with an equality `labelSelector` (`a=b,c=d`).

What it does not check: authentication and RBAC (the Role is checked separately against the
verbs the backend calls), watch, PATCH and server-side apply, field selectors, set-based label
selectors, admission, `immutable`, owner references and garbage collection, etcd's own 1.5 MiB
request limit, or namespaces existing.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAXIMUM_DATA_SIZE = 1024 * 1024
_COLLECTION = re.compile(r"^/api/v1/namespaces/([a-z0-9-]+)/configmaps$")
_OBJECT = re.compile(r"^/api/v1/namespaces/([a-z0-9-]+)/configmaps/([^/]+)$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


@dataclass
class FakeApiServer:
    """The objects by (namespace, name), and what was asked of it (verbs, for the RBAC test)."""

    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    verbs: set[str] = field(default_factory=set)
    version: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    host: str = ""

    def next_version(self) -> str:
        self.version += 1
        return str(self.version)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _invalid(body: dict[str, Any]) -> str | None:
    name = body.get("metadata", {}).get("name", "")
    if not _NAME.fullmatch(name):
        return f"metadata.name: Invalid value: {name!r}"
    total = 0
    for key, value in (body.get("data") or {}).items():
        if not _DATA_KEY.fullmatch(key):
            return f"data[{key}]: Invalid value"
        total += len(value.encode())
    for key, value in (body.get("binaryData") or {}).items():
        if not _DATA_KEY.fullmatch(key):
            return f"binaryData[{key}]: Invalid value"
        total += len(base64.b64decode(value))
    if total > MAXIMUM_DATA_SIZE:
        return f"[]: Too long: must have at most {MAXIMUM_DATA_SIZE} bytes"
    return None


def _handler(state: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length", "0"))
            loaded: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
            return loaded

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if match := _COLLECTION.match(url.path):
                state.verbs.add("list")
                selector = parse_qs(url.query).get("labelSelector", [""])[0]
                wanted = dict(p.split("=", 1) for p in selector.split(",") if p)
                with state.lock:
                    items = [
                        o
                        for (ns, _), o in sorted(state.objects.items())
                        if ns == match[1]
                        and all(
                            o["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items()
                        )
                    ]
                    version = str(state.version)
                self._send(
                    200,
                    {"kind": "ConfigMapList", "apiVersion": "v1",
                     "metadata": {"resourceVersion": version}, "items": items},
                )  # fmt: skip
            elif match := _OBJECT.match(url.path):
                state.verbs.add("get")
                with state.lock:
                    found = state.objects.get((match[1], match[2]))
                if found is None:
                    self._send(404, _status(404, "NotFound", f'configmaps "{match[2]}" not found'))
                else:
                    self._send(200, found)
            else:
                self._send(404, _status(404, "NotFound", "the server could not find it"))

        def do_POST(self) -> None:
            match = _COLLECTION.match(urlsplit(self.path).path)
            if not match:
                self._send(405, _status(405, "MethodNotAllowed", "not allowed"))
                return
            state.verbs.add("create")
            body = self._body()
            name = body.get("metadata", {}).get("name", "")
            if problem := _invalid(body):
                self._send(
                    422, _status(422, "Invalid", f'ConfigMap "{name}" is invalid: {problem}')
                )
                return
            with state.lock:
                if (match[1], name) in state.objects:
                    message = f'configmaps "{name}" already exists'
                    self._send(409, _status(409, "AlreadyExists", message))
                    return
                metadata = {
                    **body["metadata"],
                    "namespace": match[1],
                    "uid": str(uuid.uuid4()),
                    "resourceVersion": state.next_version(),
                }
                stored = {**body, "metadata": metadata}
                state.objects[(match[1], name)] = stored
            self._send(201, stored)

        def do_PUT(self) -> None:
            match = _OBJECT.match(urlsplit(self.path).path)
            if not match:
                self._send(405, _status(405, "MethodNotAllowed", "not allowed"))
                return
            state.verbs.add("update")
            body = self._body()
            if problem := _invalid(body):
                message = f'ConfigMap "{match[2]}" is invalid: {problem}'
                self._send(422, _status(422, "Invalid", message))
                return
            with state.lock:
                current = state.objects.get((match[1], match[2]))
                if current is None:
                    self._send(404, _status(404, "NotFound", f'configmaps "{match[2]}" not found'))
                    return
                sent = body.get("metadata", {}).get("resourceVersion")
                if sent and sent != current["metadata"]["resourceVersion"]:
                    message = (
                        f'Operation cannot be fulfilled on configmaps "{match[2]}": the object'
                        " has been modified; please apply your changes to the latest version"
                        " and try again"
                    )
                    self._send(409, _status(409, "Conflict", message))
                    return
                metadata = {
                    **body["metadata"],
                    "namespace": match[1],
                    "uid": current["metadata"]["uid"],
                    "resourceVersion": state.next_version(),
                }
                stored = {**body, "metadata": metadata}
                state.objects[(match[1], match[2])] = stored
            self._send(200, stored)

        def do_DELETE(self) -> None:
            match = _OBJECT.match(urlsplit(self.path).path)
            if not match:
                self._send(405, _status(405, "MethodNotAllowed", "not allowed"))
                return
            state.verbs.add("delete")
            with state.lock:
                removed = state.objects.pop((match[1], match[2]), None)
            if removed is None:
                self._send(404, _status(404, "NotFound", f'configmaps "{match[2]}" not found'))
            else:
                self._send(200, _status(200, "", "deleted") | {"status": "Success"})

    return Handler


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


@contextmanager
def running() -> Iterator[FakeApiServer]:
    """A fake API server on an ephemeral loopback port, stopped on exit."""
    state = FakeApiServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.host = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
