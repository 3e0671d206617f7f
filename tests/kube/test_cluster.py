"""The test cluster itself: its node is Ready, a pod pulled from its registry runs and finds a
Service by DNS and the API server through the `kubernetes` Service, and `down` leaves no process,
mount, network namespace, interface, iptables chain or cgroup behind."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from tests.kube.cluster import Cluster, cluster_script, start_cluster

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static: one static binary, a whole userland


def busybox_archive(path: Path) -> None:
    """A docker archive of one layer holding the static busybox, for `skopeo copy`."""
    if not BUSYBOX.is_file():
        pytest.fail(f"{BUSYBOX} is missing: install busybox-static (scripts/system-deps.sh)")
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for directory in ("bin", "tmp"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, "bin/busybox", filter=lambda i: _owned_by_root(i, 0o755))
        info = tarfile.TarInfo("bin/sh")
        info.type, info.linkname = tarfile.SYMTYPE, "busybox"
        tar.addfile(info)
    layer_bytes = layer.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/bin/busybox"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        }
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [], "Layers": [f"{diff_id}/layer.tar"]}]
    ).encode()
    with tarfile.open(path, "w") as archive:
        for name, data in (
            (f"{diff_id}/layer.tar", layer_bytes),
            (config_name, config),
            ("manifest.json", manifest),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def _owned_by_root(info: tarfile.TarInfo, mode: int) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = mode
    return info


def wait_for_phase(cluster: Cluster, namespace: str, pod: str, phases: set[str]) -> str:
    deadline = time.monotonic() + 120
    phase = ""
    while time.monotonic() < deadline:
        phase = cluster.kubectl(
            "-n", namespace, "get", "pod", pod, "-o", "jsonpath={.status.phase}"
        ).stdout.decode()
        if phase in phases:
            return phase
        time.sleep(0.5)
    described = cluster.kubectl("-n", namespace, "describe", "pod", pod, check=False).stdout
    pytest.fail(f"pod {pod} still {phase or 'unscheduled'} after 120 s:\n{described.decode()}")


def test_node_is_ready(kube_cluster: Cluster) -> None:
    ready = kube_cluster.kubectl(
        "get", "nodes", "-o", 'jsonpath={.items[*].status.conditions[?(@.type=="Ready")].status}'
    ).stdout.decode()
    assert ready == "True"


def test_pod_from_the_registry_resolves_a_service_and_reaches_the_api(
    kube_cluster: Cluster, tmp_path: Path
) -> None:
    archive = tmp_path / "busybox.tar"
    busybox_archive(archive)
    image = f"{kube_cluster.registry}/contrast-test/busybox:1"
    subprocess.run(
        [
            "skopeo",
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            f"docker-archive:{archive}",
            f"docker://{image}",
        ],
        check=True,
        capture_output=True,
    )
    namespace = kube_cluster.namespace("smoke")
    kube_cluster.kubectl("-n", namespace, "create", "service", "clusterip", "probe", "--tcp=80")
    service_ip = kube_cluster.kubectl(
        "-n", namespace, "get", "service", "probe", "-o", "jsonpath={.spec.clusterIP}"
    ).stdout.decode()
    # The API server's TLS port answers a plain HTTP request with Go's "400 Bad Request": proof
    # that the `kubernetes` Service led to it, with nothing but busybox in the pod.
    script = (
        f"nslookup probe.{namespace}.svc.cluster.local"
        " && (wget -O- http://kubernetes.default.svc.cluster.local:443/ 2>&1 || true)"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "probe", "image": image, "command": ["/bin/sh", "-c", script]}],
        },
    }
    kube_cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(pod).encode())
    phase = wait_for_phase(kube_cluster, namespace, "probe", {"Succeeded", "Failed"})
    logs = kube_cluster.kubectl("-n", namespace, "logs", "probe").stdout.decode()
    assert phase == "Succeeded", logs
    assert re.search(rf"Address:\s+{re.escape(service_ip)}\b", logs), logs
    assert "HTTP/1.0 400 Bad Request" in logs, logs
    kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def _pids_naming(directory: Path) -> set[int]:
    pids = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if f"{directory}/".encode() in (proc / "cmdline").read_bytes():
                    pids.add(int(proc.name))
            except OSError:
                continue  # exited meanwhile
    return pids


def _alive(pid: int) -> bool:
    """True while `pid` runs: a zombie (killed, not yet reaped by PID 1) does not count."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cgroup_pids(cgroup: str) -> set[int]:
    root = Path("/sys/fs/cgroup/pids") / cgroup
    return {int(pid) for procs in root.rglob("cgroup.procs") for pid in procs.read_text().split()}


def _mounts_under(directory: Path) -> list[str]:
    """Mount points under `directory`, on the host and in the cluster's mount namespace (where
    containerd and the kubelet mount the pods' volumes), while that namespace is pinned."""
    tables = [Path("/proc/self/mountinfo").read_text()]
    pinned = subprocess.run(
        ["nsenter", f"--mount={directory}/mnt/ns", "cat", "/proc/self/mountinfo"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if pinned.returncode == 0:
        tables.append(pinned.stdout)
    points = [line.split()[4] for table in tables for line in table.splitlines()]
    return sorted({point for point in points if point.startswith(f"{directory}/")})


def _shim_sockets(directory: Path) -> list[Path]:
    """Where the cluster's shims listen: containerd 1.6 names a shim's socket by the sha256 of its
    own socket, namespace and sandbox id, under /run/containerd/s (outside DIR). One path per task
    (sandboxes and containers; a container's shim is its sandbox's)."""
    tasks = directory / "containerd/state/io.containerd.runtime.v2.task/k8s.io"
    address = directory / "containerd/containerd.sock"
    return [
        Path("/run/containerd/s")
        / hashlib.sha256(f"{address}/k8s.io/{task.name}".encode()).hexdigest()
        for task in tasks.iterdir()
    ]


def _netns_names() -> set[str]:
    return {line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line}


def _links() -> set[str]:
    return {line.split()[0].split("@")[0] for line in _run("ip", "-br", "link").splitlines()}


def _run(*command: str) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def test_down_leaves_nothing() -> None:
    directory = Path(tempfile.mkdtemp(prefix="contrast-kc-", dir="/tmp"))
    try:
        cluster = start_cluster(directory)
        slot = (directory / "slot").read_text().strip()
        netns, host_link, cgroup = f"contrast-kc{slot}", f"kc{slot}-host", f"contrast-kc{slot}"
        namespace = cluster.namespace("down")
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sleeper"},
            "spec": {
                "containers": [
                    {
                        "name": "sleeper",
                        "image": "contrast.local/pause:3.10",
                        "imagePullPolicy": "Never",
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                    }
                ],
                "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
            },
        }
        cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(pod).encode())
        wait_for_phase(cluster, namespace, "sleeper", {"Running"})
        # What down must remove is there: processes, containers, mounts, the namespace's chains
        # and bridge.
        processes, containers = _pids_naming(directory), _cgroup_pids(cgroup)
        assert processes
        assert containers
        assert any("/volumes/kubernetes.io~empty-dir/" in m for m in _mounts_under(directory))
        chains = _run("nsenter", f"--net=/run/netns/{netns}", "iptables-save")
        assert ":KUBE-SERVICES" in chains
        assert "cni0" in _run("ip", "-n", netns, "-br", "link")
        assert netns in _netns_names()
        assert host_link in _links()
        shim_sockets = _shim_sockets(directory)  # the sandbox's shim: one of these per pod
        assert any(socket.exists() for socket in shim_sockets)
    finally:
        down = cluster_script("down", directory)
    assert down.returncode == 0, down.stderr.decode()
    assert not _pids_naming(directory)
    assert not [pid for pid in processes | containers if _alive(pid)]
    assert not _mounts_under(directory)
    assert netns not in _netns_names()
    assert host_link not in _links()
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{cgroup}"))
    host_chains = _run("iptables-save")
    assert "KUBE-" not in host_chains
    assert "CNI-" not in host_chains
    assert not list(Path("/var/lib/cni/results").glob(f"{netns}-*"))
    assert not [socket for socket in shim_sockets if socket.exists()]
    assert cluster_script("down", directory).returncode == 0  # twice is fine
    shutil.rmtree(directory)


def test_a_cluster_that_cannot_start_fails_with_the_log_of_what_failed() -> None:
    """The fixture's failure path, on a real failure: etcd cannot use a data directory that is
    a file. The tests that need the cluster fail (never skip) with etcd's own words, and what
    had started (containerd, the registry, the namespace) is taken down."""
    directory = Path(tempfile.mkdtemp(prefix="contrast-kc-", dir="/tmp"))
    (directory / "etcd").write_text("not a directory\n")
    try:
        with pytest.raises(pytest.fail.Exception) as failure:
            start_cluster(directory)
        message = str(failure.value)
        assert "the test cluster did not start" in message
        assert "cluster.sh: etcd: exited while starting" in message
        assert f"last lines of {directory}/logs/etcd.log" in message
        assert "not a directory" in message
        assert not _pids_naming(directory)
        assert not _mounts_under(directory)
    finally:
        cluster_script("down", directory)
        shutil.rmtree(directory)
