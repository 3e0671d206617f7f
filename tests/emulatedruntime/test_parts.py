"""The emulated runtime's parts without containerd: runc's command line, the requests, the TEE."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from contrast.api import teeendpoint as endpoint
from contrast.attestation.tdx.quote import Quote
from contrast.emulatedruntime import agentrequests, runccli
from contrast.emulatedruntime.launcher import render_launcher
from contrast.emulatedruntime.node import RUNC_ENV, STATE_ENV, NodeSettings
from contrast.emulatedruntime.teeserver import make_signer
from contrast.emulatedruntime.wrapper import run
from contrast.policy import initdata


def test_runc_calls_of_containerds_shim() -> None:
    create = runccli.parse(
        ["--root", "/run/containerd/runc/k8s.io", "--log", "/b/log.json", "--log-format", "json",
         "--systemd-cgroup", "create", "--bundle", "/b", "--pid-file", "/b/init.pid",
         "--console-socket", "/tmp/c.sock", "--no-pivot", "abc"]
    )  # fmt: skip
    assert (create.command, create.container_id) == ("create", "abc")
    assert create.option("--bundle", "-b") == "/b"
    assert (create.log, create.log_format) == ("/b/log.json", "json")
    execute = runccli.parse(["--root=/r", "exec", "--process", "/tmp/p.json", "--detach", "abc"])
    assert (execute.command, execute.option("--process", "-p"), execute.container_id) == (
        "exec", "/tmp/p.json", "abc",
    )  # fmt: skip
    assert runccli.parse(["--version"]).command == ""


POD = "/var/lib/kubelet/pods/u"


def _bind(destination: str, source: str, *options: str) -> dict[str, Any]:
    return {"destination": destination, "type": "bind", "source": source, "options": list(options)}


def _spec(**changes: Any) -> dict[str, Any]:
    namespaces = [{"type": "pid", "path": "/proc/1/ns/pid"}, {"type": "ipc", "path": "/p"},
                  {"type": "network", "path": "/n"}, {"type": "cgroup"},
                  {"type": "mount"}]  # fmt: skip
    spec: dict[str, Any] = {
        "ociVersion": "1.1.0",
        "process": {"user": {"uid": 0, "gid": 0}, "args": ["/app"], "cwd": "/",
                    "capabilities": {"bounding": ["CAP_KILL"]}},
        "root": {"path": "rootfs"},
        "mounts": [
            _bind("/dev/shm", "/run/x/shm", "ro"),
            _bind("/etc/hosts", f"{POD}/etc-hosts", "rbind", "rprivate", "rw"),
            _bind("/config", f"{POD}/volumes/kubernetes.io~configmap/c", "rbind", "rprivate", "ro"),
            _bind("/cache", f"{POD}/volumes/kubernetes.io~empty-dir/c", "rbind", "rprivate", "rw"),
            _bind("/dev/fuse", "/dev/fuse", "rbind"),
        ],
        "annotations": {"io.kubernetes.cri.container-type": "container",
                        "io.kubernetes.cri.sandbox-id": "s" * 64,
                        initdata.ANNOTATION: "H4sI", "io.katacontainers.config.x": "y"},
        "linux": {"namespaces": namespaces,
                  "resources": {"devices": [{"allow": False, "access": "rwm"}],
                                "pids": {"limit": 5},
                                "cpu": {"shares": 2, "cpus": "0-1"}},
                  "seccomp": {"defaultAction": "SCMP_ACT_ERRNO"}},
        "hooks": {"prestart": [{"path": "/bin/true"}]},
    }  # fmt: skip
    spec.update(changes)
    return spec


def test_a_container_request_is_what_the_kata_shim_sends() -> None:
    request = agentrequests.create_container_request(
        _spec(), "c1", bundle="/state/io.containerd.runtime.v2.task/k8s.io/c1",
        device_number=lambda _: 1, random=lambda: "0123456789abcdef",
    )  # fmt: skip
    oci = request["OCI"]
    assert oci["Root"] == {"Path": "/run/kata-containers/c1/rootfs", "Readonly": False}
    mounts = {m["destination"]: m for m in oci["Mounts"]}
    assert mounts["/dev/shm"] == {"destination": "/dev/shm", "source": agentrequests.SANDBOX_SHM,
                                  "type_": "bind", "options": ["rbind"]}  # fmt: skip
    shared = agentrequests.SHARED_DIR
    assert mounts["/etc/hosts"]["source"] == f"{shared}/c1-0123456789abcdef-hosts"
    assert mounts["/config"]["source"] == f"{shared}/watchable/c1-0123456789abcdef-config"
    assert mounts["/dev/fuse"]["source"] == "/dev/fuse"
    block = [s for s in request["storages"] if s["driver"] == "blk"]
    assert len(block) == 1
    assert mounts["/cache"]["source"] == block[0]["mount_point"]
    assert request["storages"][0]["driver"] == "image_guest_pull"
    # Hooks, seccomp, device cgroups, pids, the network and cgroup namespaces stay on the host.
    assert oci["Hooks"] is None
    assert oci["Linux"]["Seccomp"] is None
    assert oci["Linux"]["Resources"]["Devices"] == []
    assert oci["Linux"]["Resources"]["Pids"] is None
    assert oci["Linux"]["Resources"]["CPU"] == {"Shares": 2, "Cpus": "", "Mems": ""}
    assert oci["Linux"]["Namespaces"] == [
        {"Type": "ipc", "Path": ""},
        {"Type": "mount", "Path": ""},
    ]
    assert request["sandbox_pidns"] is True
    annotations = oci["Annotations"]
    assert initdata.ANNOTATION not in annotations
    assert "io.katacontainers.config.x" not in annotations
    assert annotations[agentrequests.KATA_BUNDLE_PATH] == (
        "/run/containerd/io.containerd.runtime.v2.task/k8s.io/c1"
    )
    assert oci["Process"]["Capabilities"]["Bounding"] == ["CAP_KILL"]


def test_a_spec_without_cri_annotations_is_not_a_pod() -> None:
    with pytest.raises(agentrequests.SpecError, match="container-type"):
        agentrequests.create_container_request(_spec(annotations={}), "c1", bundle="/b")


def test_an_exec_request_has_no_capabilities() -> None:
    request = agentrequests.exec_process_request(
        {"args": ["sh"], "cwd": "/", "user": {"uid": 0, "gid": 0}, "capabilities": {}}, "c1", "e1"
    )
    assert request["process"]["Capabilities"] is None
    assert request["process"]["Args"] == ["sh"]


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("roots")


def test_a_tdx_pod_gets_its_initdata_digest_in_mrconfigid(roots: Path) -> None:
    toml = initdata.Initdata({"policy.rego": "package agent_policy\n"}).to_toml()
    signer = make_signer("emulated-tdx", roots, toml)
    evidence = signer.issue(bytes(64))
    quote = Quote.from_bytes(evidence.report)
    assert quote.body.mr_config_id == hashlib.sha256(toml).digest() + bytes(16)


def test_the_endpoint_answers_with_evidence_or_a_reason(roots: Path, tmp_path: Path) -> None:
    toml = initdata.Initdata({"policy.rego": "package agent_policy\n"}).to_toml()
    signer = make_signer("emulated-snp", roots, toml)
    path = tmp_path / "tee.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            endpoint.answer(connection, signer)

    thread = threading.Thread(target=serve)
    thread.start()
    evidence = endpoint.SocketIssuer(path).issue(b"\x07" * 64)
    thread.join()
    listener.close()
    assert evidence.report[0xC0:0xE0] == hashlib.sha256(toml).digest()
    with pytest.raises(endpoint.EndpointError, match="64 bytes"):
        endpoint.request_evidence(path, b"short")
    with pytest.raises(endpoint.EndpointError, match="unreachable"):
        endpoint.request_evidence(tmp_path / "absent.sock", bytes(64))


def test_the_launcher_leaves_every_other_call_to_runc(tmp_path: Path) -> None:
    """`state`, `start`, `kill`, … never start Python: the launcher execs runc at once."""
    fake = tmp_path / "runc"
    fake.write_text('#!/bin/sh\necho "runc $*"\n')
    fake.chmod(0o755)
    launcher = tmp_path / "launcher"
    launcher.write_bytes(
        render_launcher(
            platform="emulated-snp",
            python="/nonexistent/python",
            runc=str(fake),
            state=tmp_path / "run",
            roots=tmp_path / "roots",
        )
    )
    launcher.chmod(0o755)
    for arguments in (["--root", "/r", "--log", "/l", "state", "c1"], ["--version"],
                      ["--root", "create", "start", "c1"], ["kill", "c1", "9"]):  # fmt: skip
        result = subprocess.run([launcher, *arguments], capture_output=True, text=True, check=True)
        assert result.stdout == f"runc {' '.join(arguments)}\n"
    for command in ("create", "exec", "delete", "update", "pause", "resume"):
        result = subprocess.run(
            [launcher, "--root", "/r", command, "c1"], capture_output=True, text=True, check=False
        )
        assert result.returncode != 0  # it went to the (missing) Python, not to runc
        assert "runc" not in result.stdout


def test_a_bare_runc_name_is_found_on_the_path(tmp_path: Path) -> None:
    program = tmp_path / "runc"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    settings = NodeSettings.from_environment({RUNC_ENV: "runc", "PATH": f"/nonexistent:{tmp_path}"})
    assert settings.runc == str(program)


def test_a_spec_that_is_not_json_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text("{not json")
    log = tmp_path / "log.json"
    settings = NodeSettings("emulated-snp", "/bin/false", tmp_path / "run", tmp_path / "roots")
    argv = ["--log", str(log), "--log-format", "json", "create", "--bundle", str(tmp_path), "c1"]
    assert run(argv, settings) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("emulated runtime: create: ")
    assert "\n" not in error
    assert json.loads(log.read_text())["level"] == "error"


def test_an_empty_dir_is_one_device_in_every_container_that_mounts_it() -> None:
    devices: dict[str, int] = {}

    def number(volume: str) -> int:
        return devices.setdefault(volume, len(devices) + 1)

    def cache_point(container: str, volume: str) -> str:
        spec = _spec(mounts=[_bind("/cache", f"{POD}/volumes/kubernetes.io~empty-dir/{volume}",
                                   "rbind", "rprivate", "rw")])  # fmt: skip
        request = agentrequests.create_container_request(
            spec, container, bundle="/b", device_number=number
        )
        return str(request["OCI"]["Mounts"][0]["source"])

    assert cache_point("c1", "shared") == cache_point("c2", "shared")
    assert cache_point("c1", "shared") != cache_point("c1", "other")


def test_a_memory_empty_dir_is_an_ephemeral_storage() -> None:
    source = f"{POD}/volumes/kubernetes.io~empty-dir/contrast-secrets"
    spec = _spec(mounts=[_bind("/contrast", source, "rbind", "rprivate", "rw")])
    request = agentrequests.create_container_request(
        spec, "c1", bundle="/b", is_tmpfs=lambda path: path == source
    )
    point = f"{agentrequests.EPHEMERAL_DIR}/contrast-secrets"
    assert request["OCI"]["Mounts"][0]["source"] == point
    assert [s for s in request["storages"] if s["driver"] == "ephemeral"] == [
        {"driver": "ephemeral", "driver_options": [], "source": "tmpfs", "fstype": "tmpfs",
         "options": [], "mount_point": point, "fs_group": None, "shared": False}
    ]  # fmt: skip


def test_the_mount_table_tells_a_tmpfs() -> None:
    assert agentrequests.on_tmpfs("/dev/shm/anything")
    assert not agentrequests.on_tmpfs("/proc/self")


def test_containerd_16s_two_dev_shm_entries_are_the_one_guest_mount() -> None:
    """containerd 1.6's sandbox spec: its default /dev/shm tmpfs, then CRI's bind. Kata's
    handleShm makes both the same bind of the sandbox's shm; it is sent once, as from 1.7."""
    tmpfs = {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}  # fmt: skip
    spec = _spec(mounts=[tmpfs, _bind("/dev/shm", "/run/c/sandboxes/s/shm", "rbind", "ro")])
    request = agentrequests.create_container_request(spec, "c1", bundle="/b")
    assert request["OCI"]["Mounts"] == [
        {"destination": "/dev/shm", "source": agentrequests.SANDBOX_SHM, "type_": "bind",
         "options": ["rbind"]}
    ]  # fmt: skip


def test_another_repeated_destination_is_sent_as_it_came() -> None:
    """Only the rewritten /dev/shm is one mount: any other destination named twice reaches the
    policy twice (which refuses it: two input mounts cannot match one policy mount)."""
    options = ("rbind", "rprivate", "rw")
    spec = _spec(mounts=[_bind("/etc/hosts", f"{POD}/etc-hosts", *options),
                         _bind("/etc/hosts", f"{POD}/other", *options)])  # fmt: skip
    request = agentrequests.create_container_request(spec, "c1", bundle="/b")
    assert [m["destination"] for m in request["OCI"]["Mounts"]] == ["/etc/hosts", "/etc/hosts"]


def test_a_refusal_reaches_runcs_log_when_stderr_is_gone(tmp_path: Path) -> None:
    """A sandbox's create: the shim no longer reads runc's stderr. The reason must still be the
    last error in runc's log, where containerd takes it for the pod's event (before, the write
    to stderr failed first and the event read "unable to retrieve OCI runtime error")."""
    (tmp_path / "config.json").write_text("{not json")
    log = tmp_path / "log.json"
    read, write = os.pipe()
    os.close(read)  # nobody reads stderr
    try:
        result = subprocess.run(
            [sys.executable, "-m", "contrast.emulatedruntime", "runc", "--log", str(log),
             "--log-format", "json", "create", "--bundle", str(tmp_path), "c1"],
            stderr=write, stdout=subprocess.DEVNULL, timeout=60, check=False,
            env={**os.environ, RUNC_ENV: "/bin/false", STATE_ENV: str(tmp_path)},
        )  # fmt: skip
    finally:
        os.close(write)
    assert result.returncode == 1
    entry = json.loads(log.read_text())
    assert entry["level"] == "error"
    assert entry["msg"].startswith("emulated runtime: create: ")
