"""The `contrast coordinator` program's stderr: one JSON object per line, whatever callers send."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from contrast.api import services
from contrast.attestation.emulated.snp import EmulatedSnp
from tests.conftest import REPO
from tests.coordinator.conftest import policy, policy_hash
from tests.coordinator.program import CoordinatorProcess, command, not_json_objects


@pytest.fixture
def program(
    tmp_path: Path, emulated_tee: EmulatedSnp, tee_dir: Path
) -> Iterator[CoordinatorProcess]:
    running = CoordinatorProcess.start(
        tmp_path / "state", tee_dir, policy_hash(policy("coordinator"))
    )
    yield running
    running.stop()


def test_garbage_from_unauthenticated_callers_leaves_one_json_object_per_line(
    program: CoordinatorProcess,
) -> None:
    for method in (services.SET_MANIFEST, services.RECOVER, services.NEW_MESH_CERT):
        for _ in range(5):
            assert program.call(method, b"\xff\xff\xff") == grpc.StatusCode.INVALID_ARGUMENT
    for _ in range(3):  # not TLS: gRPC core's handshake failure
        with socket.create_connection(("127.0.0.1", program.user_api), timeout=5) as connection:
            connection.sendall(b"GET / HTTP/1.0\r\n\r\n")
            connection.recv(100)
    with socket.create_connection(("127.0.0.1", program.http), timeout=5) as connection:
        connection.sendall(b"\x16\x03\x01 not http\r\n\r\n")
        connection.recv(100)
    lines = program.stop()
    assert not_json_objects(lines) == []
    messages = [json.loads(line)["message"] for line in lines]
    assert any("stopping on signal" in message for message in messages)
    refusals = [m for m in messages if m.startswith("SetManifest refused (INVALID_ARGUMENT)")]
    assert len(refusals) == 1, messages  # repeats are counted, not logged


def test_a_start_up_failure_is_one_json_line(tmp_path: Path, tee_dir: Path) -> None:
    state = tmp_path / "state"
    state.write_text("a file where the state directory should be")
    result = subprocess.run(
        command(state, tee_dir, policy_hash(policy("coordinator"))),
        cwd=REPO, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert not_json_objects(lines) == []
    [entry] = [json.loads(line) for line in lines]
    assert entry["level"] == "error"
    assert str(state) in entry["message"]


def test_a_port_in_use_is_one_json_line(tmp_path: Path, tee_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        arguments = command(tmp_path / "state", tee_dir, policy_hash(policy("coordinator")))
        arguments[arguments.index("--user-api-port") + 1] = str(port)
        result = subprocess.run(arguments, cwd=REPO, capture_output=True, timeout=60, check=False)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert not_json_objects(lines) == []
    messages = [json.loads(line)["message"] for line in lines]
    expected = f"the Coordinator cannot start: cannot listen on 127.0.0.1:{port}"
    assert any(message.startswith(expected) for message in messages), messages
