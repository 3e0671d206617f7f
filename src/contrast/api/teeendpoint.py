"""The emulated TEE as a pod sees it: one unix socket per pod, served by the node.

On real hardware a guest asks its TEE for a report and chooses only REPORT_DATA; HOSTDATA /
MRCONFIGID were fixed by the host when the VM started, from the pod's initdata. The emulated
confidential runtime keeps that contract with this endpoint: it serves one pod, signs with the
node's emulated roots (which never enter the pod), fixes the policy hash from the initdata the
pod was started with, and takes exactly 64 bytes of REPORT_DATA per request, nothing else.

Wire format, one exchange per connection: the client sends `MAGIC` and 64 bytes of report data;
the server answers one status byte (0 evidence, 1 error), a 4-byte big-endian length and that
many bytes: the `Evidence` protobuf of `contrast.api`, or a UTF-8 error message.

It lives in `api`, beside the protobuf it frames, not in `attestation`: the emulated TEE itself
(`attestation.emulated`) signs the evidence, and `api.convert` turns it into the message, so the
endpoint sits above both.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from contrast.api.convert import evidence_from_proto, evidence_to_proto
from contrast.api.errors import ApiError
from contrast.api.evidence_pb2 import Evidence as EvidenceMessage
from contrast.attestation.emulated.socketpath import (
    CONTAINER_DIRECTORY,
    DEFAULT_SOCKET,
    SOCKET_ENV,
    SOCKET_NAME,
)
from contrast.attestation.evidence import Evidence
from contrast.errors import ContrastError

__all__ = ["CONTAINER_DIRECTORY", "DEFAULT_SOCKET", "SOCKET_ENV", "SOCKET_NAME", "SocketIssuer"]

MAGIC = b"contrast-tee-1\n"
REPORT_DATA_SIZE = 64
STATUS_EVIDENCE = 0
STATUS_ERROR = 1
MAX_RESPONSE = 1 << 20
TIMEOUT = 30.0
MAX_SOCKET_PATH = 100
MAX_REQUEST = 64 * 1024


class EndpointError(ApiError):
    """The pod's emulated TEE could not be reached, or refused the request."""


class Signer(Protocol):
    def issue(self, report_data: bytes) -> Evidence: ...


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            break
        data.extend(chunk)
    return bytes(data)


def answer(connection: socket.socket, signer: Signer) -> None:
    """Serve one request on `connection` with `signer` (whose policy hash the node fixed)."""
    request = _read_exactly(connection, len(MAGIC) + REPORT_DATA_SIZE)
    if len(request) != len(MAGIC) + REPORT_DATA_SIZE or not request.startswith(MAGIC):
        _reply(connection, STATUS_ERROR, f"send {MAGIC!r} and {REPORT_DATA_SIZE} bytes".encode())
        return
    connection.settimeout(0.2)
    try:
        extra = connection.recv(1)
    except TimeoutError:
        extra = b""
    if extra:
        # Anything beyond REPORT_DATA (a HOSTDATA of the pod's choosing) is refused, not ignored.
        # The rest is read first: closing on unread data would reset the connection unanswered.
        with contextlib.suppress(OSError):
            _read_exactly(connection, MAX_REQUEST)
        _reply(connection, STATUS_ERROR, b"the request carries more than REPORT_DATA")
        return
    try:
        evidence = signer.issue(request[len(MAGIC) :])
    except ContrastError as error:
        _reply(connection, STATUS_ERROR, str(error).encode())
        return
    _reply(connection, STATUS_EVIDENCE, evidence_to_proto(evidence).SerializeToString())


def _reply(connection: socket.socket, status: int, payload: bytes) -> None:
    connection.sendall(struct.pack(">BI", status, len(payload)) + payload)


def request_evidence(path: Path, report_data: bytes, *, timeout: float = TIMEOUT) -> Evidence:
    """Evidence for `report_data` from the pod's emulated TEE at `path`."""
    if len(report_data) != REPORT_DATA_SIZE:
        raise EndpointError(f"REPORT_DATA is {REPORT_DATA_SIZE} bytes, got {len(report_data)}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        try:
            _connect(connection, Path(path))
            connection.sendall(MAGIC + report_data)
            connection.shutdown(socket.SHUT_WR)
            header = _read_exactly(connection, 5)
            if len(header) != 5:
                raise EndpointError(f"the emulated TEE at {path} closed without an answer")
            status, length = struct.unpack(">BI", header)
            if length > MAX_RESPONSE:
                raise EndpointError(f"the emulated TEE at {path} answered {length} bytes")
            payload = _read_exactly(connection, length)
        except OSError as error:
            raise EndpointError(
                f"the emulated TEE at {path} is unreachable: {error.strerror or error}",
                hint="run the pod with the emulated runtime's RuntimeClass",
            ) from None
    if len(payload) != length:
        raise EndpointError(f"the emulated TEE at {path} sent a truncated answer")
    if status != STATUS_EVIDENCE:
        raise EndpointError(f"the emulated TEE refused: {payload.decode(errors='replace')}")
    message = EvidenceMessage()
    message.ParseFromString(payload)
    return evidence_from_proto(message)


def _connect(connection: socket.socket, path: Path) -> None:
    """Connect to `path`, also when it is longer than a socket address may be (108 bytes):
    then through the descriptor of its directory (`/proc/self/fd/<n>/<name>`)."""
    if len(os.fsencode(path)) < MAX_SOCKET_PATH:
        connection.connect(os.fspath(path))
        return
    directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        connection.connect(f"/proc/self/fd/{directory}/{path.name}")
    finally:
        os.close(directory)


@dataclass(frozen=True)
class SocketIssuer:
    """An issuer for workloads of the emulated runtime: evidence from the pod's TEE socket.

    The pod cannot choose the policy hash (the node fixed it) nor sign anything itself.
    """

    path: Path = Path(DEFAULT_SOCKET)

    def issue(self, report_data: bytes) -> Evidence:
        return request_evidence(self.path, report_data)
