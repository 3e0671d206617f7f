"""`contrast coordinator` as a separate process on loopback, with its stderr kept for inspection."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from contrast.api import services
from contrast.atls.client import fetch_certificate, pinned_channel
from tests.conftest import REPO

_PORTS = re.compile(r"user API (\d+), mesh API (\d+), HTTP (\d+)")


def command(
    state_dir: Path, tee_dir: Path, policy_hash: bytes, extra: Sequence[str] = ()
) -> list[str]:
    """`contrast coordinator` on loopback with the emulated SNP TEE; ephemeral ports unless
    `extra` names them."""
    return [
        sys.executable, "-m", "contrast", "coordinator", "--tee", "emulated-snp",
        "--tee-state", str(tee_dir), "--policy-hash", policy_hash.hex(),
        "--state-dir", str(state_dir), "--listen", "127.0.0.1", "--user-api-port", "0",
        "--mesh-api-port", "0", "--http-port", "0", "--transit-port", "0", *extra,
    ]  # fmt: skip


@dataclass
class CoordinatorProcess:
    """A running Coordinator program: its ports, channels to both APIs, and its stderr lines."""

    process: subprocess.Popen[bytes]
    user_api: int
    mesh_api: int
    http: int
    lines: list[bytes] = field(default_factory=list)
    _channels: dict[str, grpc.Channel] = field(default_factory=dict)
    _reader: threading.Thread | None = None

    @classmethod
    def start(
        cls, state_dir: Path, tee_dir: Path, policy_hash: bytes, extra: Sequence[str] = ()
    ) -> CoordinatorProcess:
        process = subprocess.Popen(
            command(state_dir, tee_dir, policy_hash, extra), cwd=REPO, stderr=subprocess.PIPE
        )
        assert process.stderr is not None
        first = process.stderr.readline()
        found = _PORTS.search(first.decode())
        if found is None:
            process.kill()
            raise AssertionError(f"the Coordinator did not start: {first!r}")
        running = cls(process, *(int(port) for port in found.groups()), lines=[first])
        running._reader = threading.Thread(target=running._read, daemon=True)
        running._reader.start()
        return running

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def channel(self, service: str) -> grpc.Channel:
        port = self.mesh_api if service == services.MESH_API else self.user_api
        if service not in self._channels:
            target = f"127.0.0.1:{port}"
            self._channels[service] = pinned_channel(target, fetch_certificate(target))
        return self._channels[service]

    def answer(
        self, method: services.Method[Any, Any], payload: bytes
    ) -> tuple[grpc.StatusCode, bytes]:
        """Send raw request bytes; the status code and the response bytes (empty on error)."""
        try:
            response: bytes = self.channel(method.service).unary_unary(method.path)(
                payload, timeout=20
            )
        except grpc.RpcError as error:
            code: grpc.StatusCode = error.code()
            return code, b""
        return grpc.StatusCode.OK, response

    def call(self, method: services.Method[Any, Any], payload: bytes) -> grpc.StatusCode:
        """Send raw request bytes; the status code of the answer."""
        return self.answer(method, payload)[0]

    def stop(self) -> list[bytes]:
        """Stop the program (SIGTERM) and return every line it wrote to stderr."""
        for channel in self._channels.values():
            channel.close()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self._reader is not None:
            self._reader.join(timeout=10)
        return self.lines


def not_json_objects(lines: list[bytes]) -> list[bytes]:
    """The lines that are not exactly one JSON object each."""
    bad = []
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            bad.append(line)
            continue
        if not isinstance(value, dict):
            bad.append(line)
    return bad
