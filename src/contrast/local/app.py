"""A stand-in workload for the local demo: a plain HTTP server and client behind the mesh.

Like a real app in a Contrast pod it knows nothing about TLS: the server answers on loopback, its
sidecar terminates mutual TLS in front of it; the client talks to its sidecar's egress listener,
which originates mutual TLS with the client's mesh certificate. `probe-without-certificate` plays
an outsider that has the mesh CA but no certificate of its own.

Run as `python -m contrast.local.app serve|request|probe-without-certificate ...`.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def handler(name: str) -> type[BaseHTTPRequestHandler]:
    """Answers every GET with `hello from <name>`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"hello from {name}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler


def serve(port: int, name: str) -> None:
    ThreadingHTTPServer(("127.0.0.1", port), handler(name)).serve_forever()


def request(address: str, port: int) -> str:
    connection = http.client.HTTPConnection(address, port, timeout=10)
    try:
        connection.request("GET", "/")
        response = connection.getresponse()
        return f"HTTP {response.status}: {response.read().decode().strip()}"
    finally:
        connection.close()


def probe_without_certificate(mesh_ca: Path, port: int, server_name: str) -> str:
    """Try TLS to a mesh listener with no client certificate; say what happened."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(mesh_ca)
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=server_name) as tls,
        ):
            tls.sendall(b"GET / HTTP/1.0\r\n\r\n")
            answer = tls.recv(100)
    except (OSError, ssl.SSLError) as error:
        return f"refused: {error.__class__.__name__}"
    return "refused: connection closed" if not answer else f"ANSWERED: {answer[:40]!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contrast.local.app")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_parser = sub.add_parser("serve")
    serve_parser.add_argument("--port", type=int, required=True)
    serve_parser.add_argument("--name", required=True)
    request_parser = sub.add_parser("request")
    request_parser.add_argument("--address", default="127.0.0.1")
    request_parser.add_argument("--port", type=int, required=True)
    probe_parser = sub.add_parser("probe-without-certificate")
    probe_parser.add_argument("--mesh-ca", type=Path, required=True)
    probe_parser.add_argument("--port", type=int, required=True)
    probe_parser.add_argument("--server-name", required=True)
    arguments = parser.parse_args(argv)
    if arguments.command == "serve":
        serve(arguments.port, arguments.name)
        return 0
    if arguments.command == "probe-without-certificate":
        print(probe_without_certificate(arguments.mesh_ca, arguments.port, arguments.server_name))
        return 0
    try:
        print(request(arguments.address, arguments.port))
    except OSError as error:
        print(f"request failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
