"""A node for the emulated runtime's tests: a real containerd, runc and the runtime's launcher.

containerd runs with its own root, state and socket (the host's is not touched) and the runc
shim (`io.containerd.runc.v2`) it always has; `ctr run --runc-binary <launcher>` makes the
launcher the shim's runc, as `options.BinaryName` does under CRI. `ctr run --config` hands the
shim a spec written the way containerd's CRI writes a pod's (`cri_spec`): containerd's default
spec (`ctr oci spec`) with what CRI adds (the pod's annotations, the user's groups, kubelet's
bind mounts, the sandbox's network namespace), so that what the runtime judges is what a kubelet
would have sent, without a kubelet.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contrast.emulatedruntime import teeserver
from contrast.emulatedruntime.launcher import render_launcher
from contrast.emulatedruntime.node import NodeSettings, NodeState, Sandbox
from contrast.emulatedruntime.roots import ensure_roots, export_public
from contrast.images.model import ImageConfig, ImageFacts
from contrast.kuberesource.workloads import Workload
from contrast.policy import initdata
from contrast.policy.generate import GeneratedPolicy, PolicyGenerator, default_rules
from contrast.policy.settings import default_settings

LOGS = "/var/log/pods"
NAMESPACE = "k8s.io"  # CRI's: the bundle path Kata reports (and policies expect) names it
IMAGE = "registry.example/app@sha256:" + "ab" * 32
PROBE = ["/usr/bin/python3", "-I", "-S", "/probe.py"]
REPORT_DATA = bytes(range(64))
# Run in the app container: fetch evidence from the pod's TEE, print it, and what the pod sees.
PROBE_SCRIPT = """
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect("/run/contrast-tee/tee.sock")
s.sendall(b"contrast-tee-1\\n" + bytes(range(64)))
s.shutdown(socket.SHUT_WR)
data = b""
while chunk := s.recv(65536):
    data += chunk
sys.stdout.write(data.hex())
"""
APP_SCRIPT = """
import os, sys, time
print("roots visible:", os.path.exists(sys.argv[1]), flush=True)
print("tee dir:", sorted(os.listdir("/run/contrast-tee")), flush=True)
time.sleep(3600)
"""


def stop_servers(node: NodeState) -> None:
    """Stop the TEE server of every sandbox of `node` (a test's own state directory), so that
    a failed test leaves none running."""
    if node.sandboxes_directory.is_dir():
        for directory in node.sandboxes_directory.iterdir():
            teeserver.stop(Sandbox(directory))


def check_tools() -> None:
    tools = ("containerd", "ctr", "runc", "ip", "busybox")
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(
            f"the emulated runtime's tests need {', '.join(missing)}: run scripts/system-deps.sh"
        )
    if os.geteuid() != 0:
        raise RuntimeError("the emulated runtime's tests run containers and need root")


@dataclass
class Pod:
    name: str
    yaml: dict[str, Any]
    policy: GeneratedPolicy
    sandbox_id: str = field(default_factory=lambda: uuid.uuid4().hex + uuid.uuid4().hex)
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    netns: str = field(default_factory=lambda: f"cni-{uuid.uuid4()}")

    @property
    def annotation(self) -> str:
        return self.policy.annotation


def app_pod(roots: Path, name: str = "app") -> Pod:
    """A pod whose app container runs Python from the node's /usr (a hostPath volume); it
    reports whether it can see `roots`, the node's emulated roots."""
    settings = default_settings()
    pause = settings.pause_image
    images = {
        pause: ImageFacts(pause, "", ImageConfig(user="65535:65535", entrypoint=("/pause",))),
        IMAGE: ImageFacts(IMAGE, "", ImageConfig(env=("PATH=/usr/bin:/bin",))),
    }
    yaml = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            # generate places the pod on the emulated platform: its settings, as for any pod there.
            "runtimeClassName": "contrast-cc-emulated-snp",
            "volumes": [
                {"name": "usr", "hostPath": {"path": "/usr"}},
                # As the Initializer's contrast-secrets: kubelet mounts a tmpfs for it.
                {"name": "secrets", "emptyDir": {"medium": "Memory"}},
            ],
            "containers": [
                {
                    "name": "app",
                    "image": IMAGE,
                    "command": ["/usr/bin/python3", "-I", "-S", "/app.py"],
                    "args": [str(roots)],
                    "env": [{"name": "GREETING", "value": "hello"}],
                    "volumeMounts": [
                        {"name": "usr", "mountPath": "/usr", "readOnly": True},
                        {"name": "secrets", "mountPath": "/contrast"},
                    ],
                    "livenessProbe": {"exec": {"command": PROBE}},
                }
            ],
        },
    }
    policy = PolicyGenerator(default_rules(), settings).generate(Workload(yaml), images)
    return Pod(name, yaml, policy)


class Node:
    """containerd with the emulated runtime's launcher as its runc, in `directory`."""

    def __init__(self, directory: Path, platform: str = "emulated-snp") -> None:
        self.directory = directory
        self.roots = directory / "roots"
        self.public = directory / "public"
        self.state = directory / "run"
        self.launcher = directory / "contrast-emulated-runc"
        self.settings = NodeSettings(
            platform=platform, runc=shutil.which("runc") or "runc", state=self.state,
            roots=self.roots,
        )  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self.netns: list[str] = []
        self.tmpfs: list[Path] = []

    def start(self) -> None:
        check_tools()
        ensure_roots(self.roots)
        export_public(self.roots, self.public)
        self.launcher.write_bytes(
            render_launcher(
                platform=self.settings.platform, python=sys.executable,
                runc=os.path.realpath(self.settings.runc), state=self.state, roots=self.roots,
            )
        )  # fmt: skip
        self.launcher.chmod(0o755)
        self.sockets = Path(f"/tmp/er-{uuid.uuid4().hex[:8]}")
        self.sockets.mkdir()
        self.socket = self.sockets / "containerd.sock"
        config = self.directory / "containerd.toml"
        config.write_text(
            "version = 2\n"
            f'root = "{self.directory / "containerd"}"\n'
            f'state = "{self.sockets / "state"}"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{self.socket}"\n'
        )
        log = (self.directory / "containerd.log").open("wb")
        self.process = subprocess.Popen(
            ["containerd", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 30
        while not self.socket.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not start: {self.directory}/containerd.log")
            time.sleep(0.05)
        self.rootfs = self._rootfs()

    def stop(self) -> None:
        # A containerd a test stopped is not asked (ctr waits 10 s for a socket nobody serves).
        if self.process is not None and self.process.poll() is None:
            for container in self.containers():
                self.ctr("tasks", "kill", "--signal", "SIGKILL", container, check=False)
            time.sleep(0.3)
            for container in self.containers():
                self.remove(container)
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
        for path in self.tmpfs:
            subprocess.run(["umount", str(path)], check=False)
        for netns in self.netns:
            subprocess.run(["ip", "netns", "delete", netns], check=False)
        shutil.rmtree(self.sockets, ignore_errors=True)

    def ctr(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["ctr", "--address", str(self.socket), "--namespace", NAMESPACE, *arguments]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(arguments[:2])}: {result.stderr.strip()}")
        return result

    def containers(self) -> list[str]:
        lines = self.ctr("containers", "list", "--quiet", check=False).stdout.split()
        return [line for line in lines if line]

    def remove(self, container: str) -> None:
        self.ctr("tasks", "delete", "--force", container, check=False)
        self.ctr("containers", "delete", container, check=False)

    # --- pods -----------------------------------------------------------------------------

    def _rootfs(self) -> dict[str, Path]:
        pause = self.directory / "rootfs-pause"
        (pause / "bin").mkdir(parents=True)
        shutil.copy(shutil.which("busybox") or "busybox", pause / "bin" / "busybox")
        (pause / "pause").write_text("#!/bin/busybox sh\nexec /bin/busybox sleep 3600\n")
        (pause / "pause").chmod(0o755)
        app = self.directory / "rootfs-app"
        for name in ("usr", "proc", "dev", "sys", "etc", "tmp", "run"):
            (app / name).mkdir(parents=True)
        for name in ("bin", "lib", "lib64", "sbin"):
            (app / name).symlink_to(f"usr/{name}")
        (app / "probe.py").write_text(PROBE_SCRIPT)
        (app / "app.py").write_text(APP_SCRIPT)
        kubelet = self.directory / "kubelet"
        kubelet.mkdir()
        files = {"hosts": "127.0.0.1 localhost\n", "hostname": "app\n",
                 "resolv.conf": "nameserver 10.96.0.10\n", "termination-log": ""}  # fmt: skip
        for name, text in files.items():
            (kubelet / name).write_text(text)
        (kubelet / "shm").mkdir()  # the sandbox's shm CRI binds (a tmpfs on a node)
        return {"pause": pause, "app": app, "kubelet": kubelet}

    def base_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = json.loads(self.ctr("oci", "spec").stdout)
        return spec

    def sandbox_spec(self, pod: Pod) -> dict[str, Any]:
        """The pause container's spec as CRI writes it for `pod`."""
        if pod.netns not in self.netns:
            subprocess.run(["ip", "netns", "add", pod.netns], check=True)
            self.netns.append(pod.netns)
        spec = self.base_spec()
        spec["root"] = {"path": str(self.rootfs["pause"]), "readonly": True}
        spec["hostname"] = pod.name
        process = spec["process"]
        process.update(args=["/pause"], cwd="/", noNewPrivileges=True)
        process["user"] = {"uid": 65535, "gid": 65535, "additionalGids": [65535]}
        spec["mounts"] = [m for m in spec["mounts"] if m["destination"] != "/run"]
        # As containerd 1.6's CRI (Debian's, the emulated platforms'): its default /dev/shm tmpfs
        # stays and CRI's bind of the sandbox's shm follows it; resolv.conf is `rbind,ro` only.
        spec["mounts"].append(self._bind("/dev/shm", "shm", ["rbind", "ro"]))
        spec["mounts"].append(self._bind("/etc/resolv.conf", "resolv.conf", ["rbind", "ro"]))
        spec["annotations"] = {
            "io.kubernetes.cri.container-type": "sandbox",
            "io.kubernetes.cri.sandbox-id": pod.sandbox_id,
            "io.kubernetes.cri.sandbox-name": pod.name,
            "io.kubernetes.cri.sandbox-namespace": "default",
            "io.kubernetes.cri.sandbox-uid": pod.uid,
            "io.kubernetes.cri.sandbox-log-directory": f"{LOGS}/default_{pod.name}_{pod.uid}",
            initdata.ANNOTATION: pod.annotation,
        }
        linux = spec["linux"]
        linux["namespaces"] = [
            {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
            {"type": "network", "path": f"/var/run/netns/{pod.netns}"},
        ]  # fmt: skip
        linux["sysctl"] = {"net.ipv4.ip_unprivileged_port_start": "0",
                           "net.ipv4.ping_group_range": "0 2147483647"}  # fmt: skip
        linux["cgroupsPath"] = f"/contrast-test/{pod.sandbox_id}"
        return spec

    def container_spec(self, pod: Pod, container_id: str) -> dict[str, Any]:
        """The app container's spec as CRI writes it for `pod` (from its YAML and image)."""
        container = pod.yaml["spec"]["containers"][0]
        spec = self.base_spec()
        spec["root"] = {"path": str(self.rootfs["app"]), "readonly": False}
        spec["hostname"] = pod.name
        process = spec["process"]
        env = [f"{e['name']}={e['value']}" for e in container.get("env", [])]
        process.update(
            args=[*container["command"], *container.get("args", [])],
            env=["PATH=/usr/bin:/bin", f"HOSTNAME={pod.name}", *env],
            cwd="/",
            noNewPrivileges=False,
        )
        process["user"] = {"uid": 0, "gid": 0, "additionalGids": [0]}
        spec["mounts"] = [m for m in spec["mounts"] if m["destination"] != "/run"]
        cgroup = ["nosuid", "noexec", "nodev", "relatime", "ro"]
        spec["mounts"].append(
            {
                "destination": "/sys/fs/cgroup",
                "type": "cgroup",
                "source": "cgroup",
                "options": cgroup,
            }
        )
        rw = ["rbind", "rprivate", "rw"]
        for destination in ("/etc/hosts", "/dev/termination-log", "/etc/hostname",
                            "/etc/resolv.conf"):  # fmt: skip
            spec["mounts"].append(self._bind(destination, Path(destination).name, rw))
        spec["mounts"].append({"destination": "/usr", "type": "bind", "source": "/usr",
                               "options": ["rbind", "rprivate", "ro"]})  # fmt: skip
        spec["mounts"].append(self._bind_volume("/contrast", self._memory_volume(pod, "secrets"),
                                                ["rbind", "rprivate", "rw"]))  # fmt: skip
        spec["annotations"] = {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.container-name": container["name"],
            "io.kubernetes.cri.image-name": container["image"],
            "io.kubernetes.cri.sandbox-id": pod.sandbox_id,
            "io.kubernetes.cri.sandbox-name": pod.name,
            "io.kubernetes.cri.sandbox-namespace": "default",
            "io.kubernetes.cri.sandbox-uid": pod.uid,
            initdata.ANNOTATION: pod.annotation,
        }
        spec["linux"]["namespaces"] = [
            {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
            {"type": "network", "path": f"/var/run/netns/{pod.netns}"},
        ]  # fmt: skip
        spec["linux"]["cgroupsPath"] = f"/contrast-test/{pod.sandbox_id}/{container_id}"
        return spec

    def _memory_volume(self, pod: Pod, name: str) -> Path:
        """kubelet's directory of an emptyDir of medium Memory: a tmpfs of its own."""
        path = self.directory / "pods" / pod.uid / "volumes" / "kubernetes.io~empty-dir" / name
        if not path.is_dir():
            path.mkdir(parents=True)
            subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(path)], check=True)
            self.tmpfs.append(path)
        return path

    @staticmethod
    def _bind_volume(destination: str, source: Path, options: list[str]) -> dict[str, Any]:
        return {"destination": destination, "type": "bind", "source": str(source),
                "options": options}  # fmt: skip

    def _bind(self, destination: str, name: str, options: list[str]) -> dict[str, Any]:
        source = str(self.rootfs["kubelet"] / name)
        return {"destination": destination, "type": "bind", "source": source, "options": options}

    def run(self, container_id: str, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """`ctr run --detach` with `spec` and the launcher as runc (not checked)."""
        path = self.directory / f"{container_id}.json"
        path.write_text(json.dumps(spec))
        log = self.directory / f"{container_id}.log"
        return self.ctr(
            "run", "--detach", "--runc-binary", str(self.launcher), "--config", str(path),
            f"--log-uri=file://{log}", container_id, check=False,
        )  # fmt: skip

    def log(self, container_id: str) -> str:
        path = self.directory / f"{container_id}.log"
        return path.read_text() if path.exists() else ""

    def exec(self, container_id: str, args: list[str]) -> subprocess.CompletedProcess[str]:
        return self.ctr(
            "tasks", "exec", "--exec-id", uuid.uuid4().hex[:12], container_id, *args, check=False
        )
