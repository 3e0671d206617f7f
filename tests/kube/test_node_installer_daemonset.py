"""The emulated confidential runtime installed by the node-installer DaemonSet, as a user does it.

On a cluster of its own (fresh: no runtime yet, whatever other tests did to the session's), the
release images are pushed by digest, the target ConfigMap says where this node keeps containerd's
config and its supervisor's pid file (cluster.sh runs containerd under a supervisor loop, as runit
or s6 would, and the node has no systemd), and `contrast runtime --platform emulated-snp
--image-replacements FILE` is applied with kubectl. The DaemonSet's privileged installer then
installs the runtime into the node's root with the image's own Python (the node has none with
Contrast), adds the handler to containerd's config and restarts containerd through the pid file:
a new pid, and the CRI of the new containerd lists the handler. A generated workload runs Ready
under the RuntimeClass with its runc calls in that Python, and the same workload with another
command is refused by its policy, the reason in its Failed event. Then `cluster.sh down` ends
the TEE servers and sandbox folders of the cluster's pods, and only those: a sandbox of another
cluster on the node keeps its TEE server.

The node's own setup, done here as a node's operator would: containerd's pods' network namespaces
where a node's containerd keeps them (/var/run/netns, as every generated policy expects; cluster.sh
keeps them under its state folder until install-runtime changes that), so that key of
DIR/containerd/config.toml is set before the installer restarts containerd.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from contrast.emulatedruntime import teeserver
from contrast.emulatedruntime.node import DEFAULT_STATE, NodeSettings, NodeState, Owner, Sandbox
from contrast.kuberesource.release import PAUSE_IMAGE, TARGET_CONFIG_MAP
from tests.kube import deploy
from tests.kube.cluster import Cluster, cluster_script, start_cluster
from tests.kube.flow import deployment_yaml
from tests.kube.test_policy_on_cluster import busybox_image, cli, failed_events, push

PLATFORM = "emulated-snp"
CLUSTER_PAUSE = "contrast.local/pause:3.10"  # the test cluster's sandbox image (cluster.sh)
INSTALL_TIMEOUT = 300
READY_TIMEOUT = 120
COMMAND = ["/bin/sh", "-c", "echo started; exec sleep 1000000"]
OTHER_COMMAND = ["/bin/sh", "-c", "cat /proc/self/environ; exec sleep 1000000"]


@pytest.fixture(scope="module")
def fresh_cluster() -> Iterator[Cluster]:
    """A cluster of this module's own, taken down at its end; one that cannot start fails."""
    directory = Path(tempfile.mkdtemp(prefix="contrast-kc-", dir="/tmp"))
    try:
        yield start_cluster(directory)
    finally:
        cluster_script("down", directory)
        shutil.rmtree(directory, ignore_errors=True)


def containerd_pid(cluster: Cluster) -> int:
    return int((cluster.directory / "containerd.pid").read_text())


def cri_runtimes(cluster: Cluster) -> dict[str, Any]:
    """The runtimes the running containerd's CRI plugin has (RuntimeService/Status, verbose:
    its `config` info), asked over its socket as the kubelet asks."""
    socket_path = cluster.directory / "containerd/containerd.sock"
    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        status = channel.unary_unary("/runtime.v1.RuntimeService/Status")
        answer: bytes = status(b"\x08\x01", timeout=10)  # StatusRequest{verbose: true}
    info = dict(_map_entries(answer, field=2))
    runtimes: dict[str, Any] = json.loads(info["config"])["containerd"]["runtimes"]
    return runtimes


def _map_entries(message: bytes, field: int) -> Iterator[tuple[str, str]]:
    """The string map entries of protobuf field `field` of `message` (wire format, by hand)."""
    for number, value in _fields(message):
        if number == field and isinstance(value, bytes):
            entry = dict(_fields(value))
            key, text = entry.get(1, b""), entry.get(2, b"")
            assert isinstance(key, bytes)
            assert isinstance(text, bytes)
            yield key.decode(), text.decode()


def _fields(message: bytes) -> Iterator[tuple[int, bytes | int]]:
    position = 0
    while position < len(message):
        key, position = _varint(message, position)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(message, position)
            yield number, value
        elif wire == 2:
            length, position = _varint(message, position)
            yield number, message[position : position + length]
            position += length
        else:
            raise AssertionError(f"unexpected wire type {wire} in a CRI answer")


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def wait_installed(cluster: Cluster, name: str) -> str:
    """Waits until the DaemonSet's pod runs with its installer completed; the installer's log."""
    deadline = time.monotonic() + INSTALL_TIMEOUT
    selector = f"app.kubernetes.io/name={name}"
    while time.monotonic() < deadline:
        listed = json.loads(
            cluster.kubectl("-n", "kube-system", "get", "pods", "-l", selector, "-o", "json").stdout
        )["items"]
        for pod in listed:
            status = pod.get("status", {})
            init = status.get("initContainerStatuses") or [{}]
            terminated = init[0].get("state", {}).get("terminated")
            if terminated and terminated.get("exitCode") != 0:
                log = cluster.kubectl(
                    "-n", "kube-system", "logs", pod["metadata"]["name"], "-c", "installer",
                    check=False,
                )  # fmt: skip
                pytest.fail(f"the installer failed: {terminated}\n{log.stdout.decode()}")
            if status.get("phase") == "Running" and terminated:
                log = cluster.kubectl(
                    "-n", "kube-system", "logs", pod["metadata"]["name"], "-c", "installer"
                )
                return log.stdout.decode()
        time.sleep(1)
    pytest.fail(
        f"the node installer's pod did not run in {INSTALL_TIMEOUT} s\n"
        + deploy.describe(cluster, "kube-system")
    )


def tee_server_commands(bundle: Path) -> list[str]:
    """Command lines of the node's TEE servers that run the bundled Python at `bundle` (its
    loader: /proc shows the argv the wrapper exec'd, not the one `--argv0` gives Python)."""
    found = []
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        try:
            arguments = (process / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        line = " ".join(a.decode(errors="replace") for a in arguments if a)
        if " tee-server " in line and line.startswith(f"{bundle}/so/"):
            found.append(line)
    return found


def test_the_daemonset_installs_the_runtime_and_a_generated_pod_runs_under_it(
    fresh_cluster: Cluster, release_layout: Path, tmp_path: Path
) -> None:
    cluster = fresh_cluster
    began = time.monotonic()
    config_path = cluster.directory / "containerd/config.toml"
    config = config_path.read_text()
    assert "  netns_mounts_under_state_dir = true\n" in config
    config_path.write_text(
        config.replace(
            "  netns_mounts_under_state_dir = true\n", "  netns_mounts_under_state_dir = false\n"
        )
    )
    before = containerd_pid(cluster)

    replacements = deploy.push_release(release_layout, cluster.registry, tmp_path)
    with replacements.open("a") as file:
        file.write(f"{PAUSE_IMAGE}={CLUSTER_PAUSE}\n")
    pushed = dict(line.split("=", 1) for line in replacements.read_text().splitlines())
    (installer_image,) = [v for k, v in pushed.items() if "/node-installer:" in k]
    print(f"release images pushed: {time.monotonic() - began:.1f} s")

    directory = str(cluster.directory).lstrip("/")
    cluster.kubectl(
        "-n", "kube-system", "create", "configmap", TARGET_CONFIG_MAP,
        f"--from-literal=containerd-config-path={directory}/containerd/config.toml",
        f"--from-literal=containerd-pid-file={directory}/containerd.pid",
        f"--from-literal=emulated-runc={shutil.which('runc')}",
    )  # fmt: skip
    printed = cli("runtime", "--platform", PLATFORM, "--image-replacements", str(replacements))
    documents = deploy.documents_of(printed)
    (runtime_class,) = [d for d in documents if d["kind"] == "RuntimeClass"]
    (daemonset,) = [d for d in documents if d["kind"] == "DaemonSet"]
    handler = runtime_class["handler"]
    pod_spec = daemonset["spec"]["template"]["spec"]
    assert pod_spec["initContainers"][0]["image"] == installer_image
    assert pod_spec["containers"][0]["image"] == CLUSTER_PAUSE
    assert pod_spec["hostPID"] is True
    cluster.kubectl("apply", "-f", "-", input=printed.encode())

    log = wait_installed(cluster, daemonset["metadata"]["name"])
    print(f"installed {time.monotonic() - began:.1f} s after the test began:\n{log}")
    assert f"runtime {handler} in /opt/edgeless/{handler}" in log
    assert "runtime added" in log
    assert "containerd restarted" in log

    # containerd was restarted through its supervisor: another pid, which knows the handler.
    after = containerd_pid(cluster)
    assert after != before
    runtimes = cri_runtimes(cluster)
    launcher = Path(f"/opt/edgeless/{handler}/bin/contrast-emulated-runc")
    assert runtimes[handler]["options"]["BinaryName"] == str(launcher)
    assert (
        tomllib.loads(config_path.read_text())["plugins"]["io.containerd.grpc.v1.cri"][
            "netns_mounts_under_state_dir"
        ]
        is False
    )
    # The launcher runs the Python the installer brought, not the node's.
    (bundle,) = [
        line.split()[1] for line in launcher.read_text().splitlines() if " -m contrast." in line
    ]
    bundle_home = Path(bundle).parents[1]
    assert bundle_home.parent == Path(f"/opt/edgeless/{handler}")
    assert bundle_home.name.startswith("python-")
    assert (bundle_home / "site-packages/regorus").is_dir()
    cluster.kubectl("wait", "--for=condition=Ready", "--timeout=90s", "node/contrast-node")

    # A generated workload, and the same with another command after generate.
    namespace = cluster.namespace("daemonset")
    busybox_image(tmp_path / "busybox.tar", "daemonset")
    image = push(tmp_path / "busybox.tar", f"{cluster.registry}/daemonset/busybox:1", tmp_path)
    workspace = tmp_path / "workspace"
    resources = workspace / "resources"
    resources.mkdir(parents=True)
    (resources / "coordinator.yml").write_text(
        cli("coordinator-resources", "--platform", PLATFORM, "--namespace", namespace)
    )
    (resources / "app.yml").write_text(
        "---\n".join(deployment_yaml(name, namespace, image, COMMAND) for name in ("app", "other"))
    )
    cli(
        "generate", "--workspace-dir", str(workspace), "--reference-values", PLATFORM,
        "--skip-initializer", "--oci-layout", str(release_layout),
        "--insecure-registry", cluster.registry, str(resources),
    )  # fmt: skip
    workloads = {
        d["metadata"]["name"]: d for d in deploy.documents_of((resources / "app.yml").read_text())
    }
    assert workloads["app"]["spec"]["template"]["spec"]["runtimeClassName"] == handler
    other = workloads["other"]
    other["spec"]["template"]["spec"]["containers"][0]["command"] = OTHER_COMMAND
    cluster.kubectl("apply", "-f", "-", input=deploy.dump([workloads["app"], other]))

    deploy.wait_ready(cluster, namespace, "app.kubernetes.io/name=app", 1, READY_TIMEOUT)
    print(f"app Ready under {handler} {time.monotonic() - began:.1f} s after the test began")
    assert "started" in cluster.kubectl("-n", namespace, "logs", "deploy/app").stdout.decode()
    servers = tee_server_commands(bundle_home)
    assert servers, f"no TEE server runs {bundle_home}"
    print(f"TEE server: {servers[0]}")

    deadline = time.monotonic() + READY_TIMEOUT
    while "other" not in (events := failed_events(cluster, namespace)):
        if time.monotonic() > deadline:
            pytest.fail(f"no refusal of other in {READY_TIMEOUT} s: {events}\n"
                        + deploy.describe(cluster, namespace))  # fmt: skip
        time.sleep(1)
    print(f"other: {events['other']}")
    assert "CreateContainerRequest is blocked by policy: " in events["other"]
    assert "Process.Args expected" in events["other"]

    # cluster.sh down ends the pods' TEE servers and sandbox folders, which outlived every cluster
    # (issue 29: its shims killed, no delete reached the runtime), and only this cluster's: another
    # cluster's sandbox (here one whose owner is this test) keeps its server.
    sandboxes = cluster_sandboxes(cluster)
    running = [pid for pid in sandboxes.values() if pid is not None]
    assert running, f"no sandbox of this cluster with a running TEE server: {sandboxes}"
    other_cluster = start_decoy(next(iter(sandboxes)))
    try:
        down = cluster_script("down", cluster.directory)
        assert down.returncode == 0, down.stderr.decode(errors="replace")
        assert [pid for pid in running if Owner.of(pid) is not None] == []
        assert [path for path in sandboxes if path.exists()] == []
        names = [os.fsencode(f"{cluster.directory}/"), *map(os.fsencode, map(str, sandboxes))]
        assert processes_naming(names) == []
        assert other_cluster.server_pid() is not None
        assert other_cluster.exists()
    finally:
        teeserver.stop(other_cluster)
        shutil.rmtree(other_cluster.directory, ignore_errors=True)
    print(f"the whole test: {time.monotonic() - began:.1f} s")


def cluster_sandboxes(cluster: Cluster) -> dict[Path, int | None]:
    """The emulated runtime's sandboxes of this cluster's pods, each with its TEE server's pid:
    those whose recorded owner, the shim that created them, serves the cluster's containerd."""
    address = os.fsencode(str(cluster.directory / "containerd/containerd.sock"))
    found: dict[Path, int | None] = {}
    for directory in NodeState(Path(DEFAULT_STATE)).sandboxes_directory.iterdir():
        sandbox = Sandbox(directory)
        owner = sandbox.owner()
        if owner is None or not owner.runs():
            continue
        try:
            command = Path(f"/proc/{owner.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if address in command:
            found[directory] = sandbox.server_pid()
    return found


def start_decoy(model: Path) -> Sandbox:
    """A sandbox of another cluster, as the runtime makes one (the initdata of `model`), its
    owner this test and its TEE server running."""
    owner = Owner.of(os.getpid())
    assert owner is not None
    node = NodeState(Path(DEFAULT_STATE))
    sandbox = node.new_sandbox(secrets.token_hex(32), Sandbox(model).initdata(), owner)
    teeserver.start(sandbox, NodeSettings.from_environment())
    return sandbox


def processes_naming(names: list[bytes]) -> list[str]:
    """The command lines of the running processes that contain one of `names`."""
    found = []
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        try:
            command = (process / "cmdline").read_bytes()
        except OSError:
            continue
        if any(name in command for name in names):
            found.append(command.replace(b"\0", b" ").decode(errors="replace"))
    return found
