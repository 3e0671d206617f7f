"""The transit engine of the `contrast coordinator` program: started with it, on its own port.

The workload's files come from the Initializer's own client over the mesh API, so this is the
path a Vault pod takes: Initializer, then the seal's calls with the files it wrote.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import subprocess
from pathlib import Path

import grpc
import hvac
import hvac.exceptions
import pytest
import requests

from contrast.api import services, userapi_pb2
from contrast.initializer.client import obtain_mesh_certificate
from contrast.initializer.files import CERT_CHAIN, KEY, MESH_CA
from tests.conftest import REPO
from tests.coordinator.conftest import Deployment, policy_hash
from tests.coordinator.program import CoordinatorProcess, command, not_json_objects
from tests.coordinator.transit.conftest import NAMES

_TRANSIT = re.compile(rb"transit (\d+)")


def transit_port(program: CoordinatorProcess) -> int:
    found = _TRANSIT.search(program.lines[0])
    assert found is not None, program.lines[0]
    return int(found.group(1))


def test_the_program_serves_the_transit_engine(
    deployment: Deployment, tee_dir: Path, tmp_path: Path
) -> None:
    program = CoordinatorProcess.start(
        tmp_path / "state", tee_dir, policy_hash(deployment.policies["coordinator"])
    )
    try:
        url = f"https://localhost:{transit_port(program)}"
        with pytest.raises(requests.exceptions.SSLError):  # the stand-in is not trusted
            requests.put(f"{url}/v1/transit/encrypt/web", json={}, timeout=10)
        with pytest.raises(hvac.exceptions.VaultDown, match="no manifest is set"):
            hvac.Client(url=url, verify=False, timeout=10).secrets.transit.encrypt_data(
                "web", "", mount_point="transit"
            )
        request = userapi_pb2.SetManifestRequest(
            Manifest=deployment.manifest(NAMES), Policies=deployment.documents(NAMES)
        )
        assert program.call(services.SET_MANIFEST, request.SerializeToString()) == (
            grpc.StatusCode.OK
        )
        files = obtain_mesh_certificate(
            f"127.0.0.1:{program.mesh_api}", deployment.issuer("web"), deadline=30
        )
        files.write(tmp_path / "contrast")
        vault = hvac.Client(
            url=url,
            cert=(str(tmp_path / "contrast" / CERT_CHAIN), str(tmp_path / "contrast" / KEY)),
            verify=str(tmp_path / "contrast" / MESH_CA),
            timeout=10,
        )
        name = "core/v1/Pod/default/web"
        sealed = vault.secrets.transit.encrypt_data(
            name, base64.b64encode(b"root key").decode(), mount_point="transit"
        )["data"]["ciphertext"]
        opened = vault.secrets.transit.decrypt_data(name, sealed, mount_point="transit")
        assert base64.b64decode(opened["data"]["plaintext"]) == b"root key"
        with pytest.raises(hvac.exceptions.Forbidden):
            vault.secrets.transit.decrypt_data("core/v1/Pod/default/client", sealed)
        with socket.create_connection(("127.0.0.1", transit_port(program)), timeout=5) as raw:
            raw.sendall(b"GET / HTTP/1.0\r\n\r\n")  # not TLS
            with contextlib.suppress(ConnectionResetError):
                raw.recv(100)
    finally:
        lines = program.stop()
    assert not_json_objects(lines) == []
    messages = [json.loads(line)["message"] for line in lines]
    assert any(m.startswith("transit: refused POST /v1/transit/decrypt/") for m in messages)
    assert any(m.startswith("transit: TLS handshake with 127.0.0.1 refused") for m in messages)
    assert any(
        m.startswith("transit: TLS handshake") and "not serving: no manifest is set" in m
        for m in messages
    ), messages
    assert not any("root key" in line.decode() for line in lines)


def test_the_transit_port_in_use_is_one_json_line(
    deployment: Deployment, tee_dir: Path, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        arguments = command(tmp_path / "state", tee_dir, policy_hash(deployment.policies["web"]))
        arguments[arguments.index("--transit-port") + 1] = str(port)
        result = subprocess.run(arguments, cwd=REPO, capture_output=True, timeout=60, check=False)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert not_json_objects(lines) == []
    messages = [json.loads(line)["message"] for line in lines]
    expected = f"the Coordinator cannot start: cannot listen on port {port}"
    assert any(message.startswith(expected) for message in messages), messages
