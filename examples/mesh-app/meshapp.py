"""The three services of examples/mesh-app, in one file of the Python standard library only.

Like any app in a Contrast pod they know nothing of TLS or attestation: each listens in plain
HTTP on its pod's port, where its service-mesh sidecar terminates (mutual) TLS in front of it, and
dials the other services at the loopback listeners of its own sidecar's egress, which originates
mutual TLS with the pod's mesh certificate to the other service's DNS name.

- `web` (the front, TLS without client certificates on 8080, as the original's emojivoto):
  `GET /` asks `api` and `db` through its egress and shows both answers; `POST /notes` hands a
  note to `api`, `GET /notes` reads them back through `api`.
- `api` (mutual TLS only): `GET /` says who it is (its VERSION); `/notes` is passed on to `db`.
- `db` (mutual TLS only): the notes in a SQLite file on an emptyDir; each row carries an
  HMAC-SHA256 tag under a key derived from the pod's workload secret (the Initializer writes it
  to /contrast/secrets/workload-secret-seed), checked on every read, so rows written by anyone
  without the secret show as forged. `GET /` gives the key's fingerprint (SHA-256 of the derived
  key, not the secret), which stays the same across updates as long as the seed and the
  workload-secret-id do.

Run as `python3.11 meshapp.py web|api|db [options]`.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sqlite3
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TIMEOUT = 10
MAX_BODY = 64 * 1024
KEY_LABEL = b"mesh-app notes v1"


def fetch(url: str, body: bytes | None = None) -> dict[str, Any]:
    """A JSON answer from another service, or what went wrong (the caller shows it)."""
    method = "POST" if body is not None else "GET"
    # http:// to the sidecar's loopback listeners only: the URLs are the app's own flags.
    request = urllib.request.Request(url, data=body, method=method)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as error:
        return {"error": f"HTTP {error.code}: {error.read()[:200].decode(errors='replace')}"}
    except (OSError, ValueError) as error:
        return {"error": f"{error.__class__.__name__}: {error}"}


class Handler(BaseHTTPRequestHandler):
    """Routes to the service's `get`/`post`; answers JSON."""

    service: Service

    def do_GET(self) -> None:
        self._answer(self.service.get(self.path))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._answer((413, {"error": "body too large"}))
            return
        self._answer(self.service.post(self.path, self.rfile.read(length)))

    def _answer(self, result: tuple[int, dict[str, Any]]) -> None:
        status, document = result
        body = json.dumps(document, sort_keys=True).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.command} {self.path} from {self.client_address[0]}\n")


class Service:
    name = ""

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        return 404, {"error": f"no {path}"}

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        return 404, {"error": f"no {path}"}


class Web(Service):
    name = "web"

    def __init__(self, api: str, db: str) -> None:
        self.api, self.db = api, db

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        if path == "/":
            return 200, {"service": "web", "api": fetch(self.api + "/"), "db": fetch(self.db + "/")}
        if path == "/notes":
            return 200, {"service": "web", "api": fetch(self.api + "/notes")}
        return super().get(path)

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if path == "/notes":
            return 200, {"service": "web", "api": fetch(self.api + "/notes", body)}
        return super().post(path, body)


class Api(Service):
    name = "api"

    def __init__(self, db: str, version: str) -> None:
        self.db, self.version = db, version

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        if path == "/":
            return 200, {"service": "api", "version": self.version}
        if path == "/notes":
            return 200, {"service": "api", "db": fetch(self.db + "/notes")}
        return super().get(path)

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if path == "/notes":
            return 200, {"service": "api", "db": fetch(self.db + "/notes", body)}
        return super().post(path, body)


class Db(Service):
    name = "db"

    def __init__(self, data: Path, secret_file: Path) -> None:
        # The Initializer wrote the secret before this container started (it is an init
        # container); hex, as the original writes it.
        secret = bytes.fromhex(secret_file.read_text().strip())
        self.key = hmac.new(secret, KEY_LABEL, hashlib.sha256).digest()
        self.lock = threading.Lock()
        data.parent.mkdir(parents=True, exist_ok=True)
        self.connection = sqlite3.connect(data, check_same_thread=False)
        with self.lock, self.connection:
            self.connection.execute(
                "CREATE TABLE IF NOT EXISTS notes"
                " (id INTEGER PRIMARY KEY, text TEXT NOT NULL, tag TEXT NOT NULL)"
            )

    def _tag(self, text: str) -> str:
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        if path == "/":
            fingerprint = hashlib.sha256(self.key).hexdigest()[:16]
            return 200, {"service": "db", "key_fingerprint": fingerprint}
        if path == "/notes":
            with self.lock:
                rows = self.connection.execute("SELECT id, text, tag FROM notes ORDER BY id")
                notes = [
                    {"id": i, "text": t, "authentic": hmac.compare_digest(tag, self._tag(t))}
                    for i, t, tag in rows.fetchall()
                ]
            return 200, {"service": "db", "notes": notes}
        return super().get(path)

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if path == "/notes":
            text = body.decode(errors="replace")
            with self.lock, self.connection:
                cursor = self.connection.execute(
                    "INSERT INTO notes (text, tag) VALUES (?, ?)", (text, self._tag(text))
                )
            return 200, {"service": "db", "stored": cursor.lastrowid}
        return super().post(path, body)


def serve(service: Service, port: int) -> None:
    handler = type("BoundHandler", (Handler,), {"service": service})
    # Every address of the pod: the sidecar forwards to the original destination (the pod's IP).
    server = ThreadingHTTPServer(("0.0.0.0", port), handler)  # noqa: S104
    sys.stderr.write(f"{service.name} listening on :{port}\n")
    server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="meshapp.py")
    sub = parser.add_subparsers(dest="service", required=True)
    web = sub.add_parser("web")
    web.add_argument("--port", type=int, default=8080)
    web.add_argument("--api", default="http://127.137.0.1:8001")
    web.add_argument("--db", default="http://127.137.0.2:8002")
    api = sub.add_parser("api")
    api.add_argument("--port", type=int, default=8001)
    api.add_argument("--db", default="http://127.137.0.1:8002")
    db = sub.add_parser("db")
    db.add_argument("--port", type=int, default=8002)
    db.add_argument("--data", type=Path, default=Path("/data/notes.sqlite"))
    db.add_argument("--secret", type=Path, default=Path("/contrast/secrets/workload-secret-seed"))
    arguments = parser.parse_args(argv)
    service: Service
    if arguments.service == "web":
        service = Web(arguments.api, arguments.db)
    elif arguments.service == "api":
        service = Api(arguments.db, os.environ.get("VERSION", "unversioned"))
    else:
        service = Db(arguments.data, arguments.secret)
    serve(service, arguments.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
