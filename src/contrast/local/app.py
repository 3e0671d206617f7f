"""A stand-in workload for the local demo: an HTTPS server and client using the mesh files.

Both sides use only what the Initializer wrote to their `/contrast` directory: the server
requires a client certificate issued by the mesh CA, the client checks the server's the same way.
Run as `python -m contrast.local.app serve|request ...`.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509

from contrast.attestation.certificates import common_name
from contrast.initializer.files import CERT_CHAIN, KEY, MESH_CA


def server_context(files: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(files / CERT_CHAIN, files / KEY)
    context.load_verify_locations(files / MESH_CA)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(files: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(files / CERT_CHAIN, files / KEY)
    context.load_verify_locations(files / MESH_CA)
    return context


def _peer_name(connection: object) -> str:
    """The common name of the client certificate, which the mesh CA set to its first SAN."""
    der = (
        connection.getpeercert(binary_form=True) if isinstance(connection, ssl.SSLSocket) else None
    )
    if not der:
        return "?"
    return common_name(x509.load_der_x509_certificate(der).subject) or "?"


def serve(files: Path, port: int, name: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"hello from {name} to {_peer_name(self.connection)}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.socket = server_context(files).wrap_socket(server.socket, server_side=True)
    server.serve_forever()


class _MeshConnection(http.client.HTTPSConnection):
    """HTTPS to an address, checking the certificate against a workload name (its mesh SAN)."""

    def __init__(self, port: int, server_name: str, context: ssl.SSLContext) -> None:
        super().__init__(server_name, port, timeout=10)
        self._mesh_context = context

    def connect(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), self.timeout)
        self.sock = self._mesh_context.wrap_socket(raw, server_hostname=self.host)


def request(files: Path, port: int, server_name: str) -> str:
    connection = _MeshConnection(port, server_name, client_context(files))
    try:
        connection.request("GET", "/")
        response = connection.getresponse()
        return f"HTTP {response.status}: {response.read().decode().strip()}"
    finally:
        connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contrast.local.app")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_parser = sub.add_parser("serve")
    serve_parser.add_argument("--files", type=Path, required=True)
    serve_parser.add_argument("--port", type=int, required=True)
    serve_parser.add_argument("--name", required=True)
    request_parser = sub.add_parser("request")
    request_parser.add_argument("--files", type=Path, required=True)
    request_parser.add_argument("--port", type=int, required=True)
    request_parser.add_argument("--server-name", required=True)
    arguments = parser.parse_args(argv)
    if arguments.command == "serve":
        serve(arguments.files, arguments.port, arguments.name)
        return 0
    try:
        print(request(arguments.files, arguments.port, arguments.server_name))
    except (OSError, ssl.SSLError) as error:
        print(f"request failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
