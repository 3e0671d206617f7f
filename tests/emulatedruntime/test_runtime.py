"""The emulated runtime under a real containerd and runc: policies enforced, the TEE per pod.

Each pod is a sandbox (pause) and an app container whose specs are written as containerd's CRI
writes them (`node.py`), run by containerd's runc shim with the runtime's launcher as its runc.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from contrast.api import teeendpoint as endpoint
from contrast.api.convert import evidence_from_proto
from contrast.api.evidence_pb2 import Evidence as EvidenceMessage
from contrast.atls.errors import InvalidIssuerOptions
from contrast.atls.issuers import TeeKind, make_issuer
from contrast.attestation.certificates import load_certificate
from contrast.attestation.emulated.snp import load_roots
from contrast.attestation.snp.verify import verify_evidence
from contrast.policy import initdata
from tests.emulatedruntime.node import IMAGE, PROBE, REPORT_DATA, Node, Pod, app_pod

APP = "a" * 64


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    node = Node(tmp_path_factory.mktemp("emulated-node"))
    node.start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def running(node: Node) -> Pod:
    """A pod whose specs match its policy, started: sandbox, then app."""
    pod = app_pod(node.roots)
    started = node.run(pod.sandbox_id, node.sandbox_spec(pod))
    assert started.returncode == 0, started.stderr
    started = node.run(APP, node.container_spec(pod, APP))
    assert started.returncode == 0, started.stderr
    return pod


def _wait_for_log(node: Node, container: str, text: str) -> str:
    deadline = time.monotonic() + 30
    while text not in node.log(container):
        assert time.monotonic() < deadline, node.log(container)
        time.sleep(0.1)
    return node.log(container)


def _evidence(answer: bytes) -> Any:
    status, length = struct.unpack(">BI", answer[:5])
    assert status == endpoint.STATUS_EVIDENCE, answer[5:].decode(errors="replace")
    message = EvidenceMessage()
    message.ParseFromString(answer[5 : 5 + length])
    return evidence_from_proto(message)


def test_a_pod_matching_its_policy_runs_and_its_tee_signs_its_initdata(
    node: Node, running: Pod
) -> None:
    log = _wait_for_log(node, APP, "tee dir:")
    # The node's roots (with the emulated AMD/Intel keys) are not reachable from the pod; the
    # mounted TEE directory holds the socket and nothing else.
    assert "roots visible: False" in log
    assert "tee dir: ['tee.sock']" in log
    probe = node.exec(APP, PROBE)  # the liveness probe's command: the policy allows it
    assert probe.returncode == 0, probe.stderr
    evidence = _evidence(bytes.fromhex(probe.stdout))
    # Verified with the roots' public part only, as a user who exported them.
    roots = load_roots(node.public)
    assert roots is not None
    vcek = load_certificate(evidence.endorsements[0], what="VCEK")
    verified = verify_evidence(evidence.report, [vcek], now=datetime.now(UTC), roots=roots)
    toml = running.policy.initdata_toml
    assert verified.report.host_data == hashlib.sha256(toml).digest()
    assert verified.report.host_data.hex() == running.policy.policy_hash
    assert verified.report.report_data == REPORT_DATA


def _edit_args(spec: dict[str, Any]) -> None:
    spec["process"]["args"].append("--debug")


def _edit_env(spec: dict[str, Any]) -> None:
    spec["process"]["env"].append("LD_PRELOAD=/tmp/evil.so")


def _edit_mount(spec: dict[str, Any]) -> None:
    spec["mounts"].append(
        {"destination": "/host", "type": "bind", "source": "/", "options": ["rbind", "rw"]}
    )


def _edit_user(spec: dict[str, Any]) -> None:
    spec["process"]["user"]["uid"] = 1000


@pytest.mark.parametrize(
    ("edit", "rule"),
    [
        (_edit_args, "Process.Args"),
        (_edit_env, "Process.Env"),
        (_edit_mount, "OCI.Mounts"),
        (_edit_user, "Process.User"),
    ],
)
def test_a_container_changed_after_generate_is_refused_naming_the_rule(
    node: Node, running: Pod, edit: Callable[[dict[str, Any]], None], rule: str
) -> None:
    container = hashlib.sha256(rule.encode()).hexdigest()
    spec = node.container_spec(running, container)
    edit(spec)
    result = node.run(container, spec)
    assert result.returncode != 0
    # What containerd reports (a pod's event under CRI) leads with the app's failed check.
    _, _, reason = result.stderr.partition("OCI runtime create failed: ")
    assert reason.startswith("CreateContainerRequest is blocked by policy: "), result.stderr
    assert reason.split(": ", 1)[1].startswith(
        f"CreateContainerRequest: policy container 1 app - {rule}"
    )
    assert container not in node.ctr("tasks", "list", "--quiet").stdout


def test_the_oci_version_is_the_one_containerd_writes(node: Node, running: Pod) -> None:
    """The pod's policy comes from the default settings for emulated-snp, with no settings of
    the test's own: containerd 1.6's specs say 1.0.2-dev (the app started, see `running`), and
    a spec that says another version is refused."""
    container = "d" * 64
    spec = node.container_spec(running, container)
    assert spec["ociVersion"] == "1.0.2-dev"
    spec["ociVersion"] = "1.1.0"
    result = node.run(container, spec)
    node.remove(container)
    assert result.returncode != 0
    assert (
        "CreateContainerRequest: policy container 1 app - OCI.Version expected 1.0.2-dev got 1.1.0"
        in result.stderr
    ), result.stderr


def test_a_container_with_another_image_is_refused(node: Node, running: Pod) -> None:
    """Only the image changes (the command, env and mounts still match): the image rule refuses."""
    container = "b" * 64
    spec = node.container_spec(running, container)
    spec["annotations"]["io.kubernetes.cri.image-name"] = "registry.example/evil:latest"
    result = node.run(container, spec)
    node.remove(container)
    assert result.returncode != 0
    _, _, reason = result.stderr.partition("OCI runtime create failed: ")
    assert reason.startswith("CreateContainerRequest is blocked by policy: "), result.stderr
    assert reason.split(": ", 1)[1].startswith("CreateContainerRequest: policy container 1 app - ")
    # Both names of the image the guest would run: CRI's annotation and the guest pull's source.
    for check in ("io.kubernetes.cri.image-name", "image_guest_pull storage source"):
        assert f"{check} expected {IMAGE} got registry.example/evil:latest" in reason, reason
    assert container not in node.ctr("tasks", "list", "--quiet").stdout


def test_an_exec_the_policy_does_not_allow_is_refused(node: Node, running: Pod) -> None:
    result = node.exec(APP, ["/bin/cat", "/etc/hosts"])
    assert result.returncode != 0
    assert "ExecProcessRequest is blocked by policy: ExecProcessRequest denied: command" in (
        result.stderr
    )
    assert "/bin/cat /etc/hosts is not allowed" in result.stderr


def _ask(path: Path, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as connection:
        endpoint._connect(connection, path)
        connection.sendall(request)
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def test_the_pod_chooses_report_data_only(node: Node, running: Pod) -> None:
    tee = node.state / "sandboxes" / running.sandbox_id / "tee" / "tee.sock"
    chosen = hashlib.sha512(b"my key").digest()
    evidence = endpoint.request_evidence(tee, chosen)
    assert evidence.report[0x50:0x90] == chosen  # REPORT_DATA
    assert evidence.report[0xC0:0xE0].hex() == running.policy.policy_hash  # HOST_DATA
    # A HOSTDATA of its own after REPORT_DATA is refused, not ignored; so is anything else.
    other = hashlib.sha256(b"another policy").digest()
    for request in (endpoint.MAGIC + chosen + other, b"x" * 79, endpoint.MAGIC + chosen[:10]):
        status, _length = struct.unpack(">BI", _ask(tee, request)[:5])
        assert status == endpoint.STATUS_ERROR


def test_a_container_with_another_pods_initdata_is_refused(node: Node, running: Pod) -> None:
    other = app_pod(node.roots, name="other")
    container = "c" * 64
    spec = node.container_spec(running, container)
    spec["annotations"][initdata.ANNOTATION] = other.annotation
    result = node.run(container, spec)
    node.remove(container)
    assert result.returncode != 0
    assert f"carries another initdata than its sandbox {running.sandbox_id}" in result.stderr


def test_a_sandbox_its_policy_refuses_gets_no_tee(node: Node) -> None:
    pod = app_pod(node.roots, name="refused")
    spec = node.sandbox_spec(pod)
    spec["process"]["user"] = {"uid": 0, "gid": 0, "additionalGids": [0]}
    result = node.run(pod.sandbox_id, spec)
    node.remove(pod.sandbox_id)
    assert result.returncode != 0
    assert "CreateContainerRequest is blocked by policy" in result.stderr
    assert "Process.User" in result.stderr
    assert not (node.state / "sandboxes" / pod.sandbox_id).exists()


def test_a_sandbox_without_initdata_is_refused(node: Node) -> None:
    pod = app_pod(node.roots, name="plain")
    spec = node.sandbox_spec(pod)
    del spec["annotations"][initdata.ANNOTATION]
    result = node.run(pod.sandbox_id, spec)
    node.remove(pod.sandbox_id)
    assert result.returncode != 0
    assert f"has no {initdata.ANNOTATION} annotation" in result.stderr


def test_deleting_the_sandbox_ends_its_tee(node: Node) -> None:
    pod = app_pod(node.roots, name="short")
    started = node.run(pod.sandbox_id, node.sandbox_spec(pod))
    assert started.returncode == 0, started.stderr
    directory = node.state / "sandboxes" / pod.sandbox_id
    pid = int((directory / "tee-server.pid").read_text())
    assert Path(f"/proc/{pid}").exists()
    node.ctr("tasks", "kill", "--signal", "SIGKILL", pod.sandbox_id)
    time.sleep(0.5)
    node.remove(pod.sandbox_id)
    assert not directory.exists()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return "Z"


def test_the_policy_state_is_carried_between_runc_calls(node: Node, running: Pod) -> None:
    state = json.loads(
        (node.state / "sandboxes" / running.sandbox_id / "policy-state.json").read_text()
    )
    pstate = state["data"]["pstate"]
    assert pstate["sandbox_name"] == "app"
    assert pstate[running.sandbox_id] == 0
    assert pstate[APP] == 1


def test_the_workload_issuer_takes_the_pods_socket(
    node: Node, running: Pod, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--tee emulated` (Initializer, Coordinator in a pod): evidence from the pod's socket."""
    tee = node.state / "sandboxes" / running.sandbox_id / "tee" / "tee.sock"
    monkeypatch.setenv(endpoint.SOCKET_ENV, str(tee))
    issuer = make_issuer(TeeKind.EMULATED, state_dir=None, policy_hash=None)
    evidence = issuer.issue(bytes(64))
    assert evidence.report[0xC0:0xE0].hex() == running.policy.policy_hash
    with pytest.raises(InvalidIssuerOptions, match="the node fixes the policy hash"):
        make_issuer(TeeKind.EMULATED, state_dir=None, policy_hash=bytes(32))


def test_pausing_or_updating_a_container_is_refused(node: Node, running: Pod) -> None:
    """Kata's rules refuse PauseContainer and UpdateContainer (CRI's resource updates)."""
    paused = node.ctr("tasks", "pause", APP, check=False)
    assert paused.returncode != 0
    assert "PauseContainerRequest is blocked by policy" in paused.stderr
    # ctr has no update command: the call as containerd's shim makes it, to the launcher.
    updated = subprocess.run(
        [node.launcher, "--root", "/run/runc", "update", "--memory", "100000000", APP],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert updated.returncode != 0
    assert "UpdateContainerRequest is blocked by policy" in updated.stderr
    assert node.exec(APP, PROBE).returncode == 0  # still running, not paused


def test_a_dead_tee_comes_back_with_the_next_container(node: Node, running: Pod) -> None:
    directory = node.state / "sandboxes" / running.sandbox_id
    pid = int((directory / "tee-server.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _state(pid) != "Z" and Path(f"/proc/{pid}").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    tee = directory / "tee" / "tee.sock"
    with pytest.raises(endpoint.EndpointError, match="unreachable"):
        endpoint.request_evidence(tee, bytes(64))
    container = "d" * 64  # the app restarted by kubelet: a new container of the same policy entry
    started = node.run(container, node.container_spec(running, container))
    assert started.returncode == 0, started.stderr
    evidence = endpoint.request_evidence(tee, bytes(64))
    assert evidence.report[0xC0:0xE0].hex() == running.policy.policy_hash
