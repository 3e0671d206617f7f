"""A running cluster of `scripts/cluster.sh` (named by its folder), as the Kubernetes demo uses it.

Everything goes through the cluster's own kubectl and admin kubeconfig (`DIR/bin/kubectl`,
`DIR/kubeconfig`) and images through skopeo into its registry (`DIR/registry-address`), as a user
would type them; nothing here talks to the API server itself. A pod's `/contrast` is read as the
node sees it (`pod_file`): the emulated runtime has no memory encryption, so the node's root
can, which is what the demo shows of each pod's certificate.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from contrast.local.errors import LocalError
from contrast.local.meshprobe import ProbeResult

KUBECTL_TIMEOUT = 120
PUSH_TIMEOUT = 600
RELEASE_PREFIX = "ghcr.io/contrast-python/"
_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")


class KubeError(LocalError):
    """kubectl, skopeo or the cluster did not do what the demo asked."""


@dataclass(frozen=True)
class KubeCluster:
    directory: Path

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def kubectl_path(self) -> Path:
        return self.directory / "bin" / "kubectl"

    @property
    def registry(self) -> str:
        """host:port of the cluster's registry (plain HTTP), which its containerd pulls from."""
        return (self.directory / "registry-address").read_text().strip()

    def check(self) -> None:
        if not self.kubeconfig.is_file() or not (self.directory / "registry-address").is_file():
            raise KubeError(
                f"{self.directory} is not a running cluster of scripts/cluster.sh",
                hint=f"start one: bash scripts/cluster.sh up {self.directory}",
            )

    def kubectl(
        self, *args: str, input: bytes | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        command = [str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(  # noqa: S603 - the cluster's own kubectl
            command, input=input, capture_output=True, timeout=KUBECTL_TIMEOUT, check=False
        )
        if check and result.returncode != 0:
            stderr = result.stderr.decode(errors="replace").strip().splitlines()
            raise KubeError(f"kubectl {' '.join(args[:4])}: {stderr[-1] if stderr else 'failed'}")
        return result

    def ready_pods(self, namespace: str, selector: str) -> list[str]:
        """The Ready pods of `selector` that are not being deleted."""
        result = self.kubectl(
            "-n", namespace, "get", "pods", "-l", selector, "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}"
            " {.status.conditions[?(@.type=='Ready')].status}{'\\n'}{end}",
        )  # fmt: skip
        lines = [line.split() for line in result.stdout.decode().splitlines()]
        return [fields[0] for fields in lines if len(fields) == 2 and fields[1] == "True"]

    def wait_ready(
        self,
        namespace: str,
        selector: str,
        count: int,
        timeout: float,
        *,
        not_in: tuple[str, ...] = (),
    ) -> list[str]:
        """Waits until exactly `count` pods of `selector` are Ready, none of them in `not_in`
        (and no other pod of the selector is left); returns their names."""
        deadline = time.monotonic() + timeout
        while True:
            pods = self.ready_pods(namespace, selector)
            every = self.kubectl(
                "-n", namespace, "get", "pods", "-l", selector, "-o", "name"
            ).stdout.decode().split()  # fmt: skip
            if len(pods) == count == len(every) and not set(pods) & set(not_in):
                return pods
            if time.monotonic() > deadline:
                raise KubeError(
                    f"{selector}: {len(pods)} of {count} pods Ready after {timeout:.0f} s",
                    hint=f"kubectl -n {namespace} describe pods -l {selector}",
                )
            time.sleep(1)

    def wait_started(self, namespace: str, selector: str, count: int, timeout: float) -> None:
        """Waits until `count` pods of `selector` have every container started (not Ready: the
        Coordinator is Ready only once it has a manifest)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.kubectl(
                "-n", namespace, "get", "pods", "-l", selector, "-o",
                "jsonpath={range .items[*]}{.status.containerStatuses[*].started}{'\\n'}{end}",
            )  # fmt: skip
            lines = [line.split() for line in result.stdout.decode().splitlines()]
            if sum(bool(f) and all(s == "true" for s in f) for f in lines) >= count:
                return
            if time.monotonic() > deadline:
                raise KubeError(
                    f"{selector}: not {count} pods started after {timeout:.0f} s",
                    hint=f"kubectl -n {namespace} describe pods -l {selector}",
                )
            time.sleep(1)

    def pod_file(self, namespace: str, pod: str, name: str) -> bytes:
        """File `name` of a pod's `contrast-secrets` volume (its `/contrast`), as the node reads
        it: in the mount namespace the cluster's kubelet makes pod volumes in (`DIR/mnt/ns`,
        where the volume's tmpfs is; the host sees only the empty folder under it)."""
        uid = self.kubectl(
            "-n", namespace, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}"
        ).stdout.decode().strip()  # fmt: skip
        volume = self.directory / "kubelet/pods" / uid / "volumes/kubernetes.io~empty-dir"
        path = volume / "contrast-secrets" / name
        namespace_file = self.directory / "mnt" / "ns"
        if not namespace_file.exists():  # a cluster of a cluster.sh before its mount namespace
            return path.read_bytes()
        result = subprocess.run(  # noqa: S603 - the node's view of its own pod's volume
            ["nsenter", f"--mount={namespace_file}", "--", "cat", str(path)],  # noqa: S607
            capture_output=True, timeout=KUBECTL_TIMEOUT, check=False,
        )  # fmt: skip
        if result.returncode:
            raise KubeError(f"{pod}: {name}: {result.stderr.decode(errors='replace').strip()}")
        return result.stdout

    @contextlib.contextmanager
    def port_forward(
        self, namespace: str, target: str, ports: tuple[int, ...]
    ) -> Iterator[dict[int, int]]:
        """`kubectl port-forward TARGET :P...` while in the block; {remote port: local port}."""
        process = subprocess.Popen(  # noqa: S603 - the cluster's own kubectl
            [
                str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig),
                "-n", namespace, "port-forward", "--address", "127.0.0.1", target,
                *(f":{port}" for port in ports),
            ],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            assert process.stdout is not None
            local: dict[int, int] = {}
            while len(local) < len(ports):
                line = process.stdout.readline().decode()
                match = _FORWARDING.match(line)
                if not match:
                    process.kill()
                    _, stderr = process.communicate(timeout=10)
                    said = (line + stderr.decode(errors="replace")).strip()
                    raise KubeError(f"kubectl port-forward {target}: {said}")
                local[int(match.group(2))] = int(match.group(1))
            yield local
        finally:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
            if process.poll() is None:
                process.kill()
                process.wait()

    def probe(
        self,
        namespace: str,
        target: str,
        port: int,
        probe: Callable[[int], ProbeResult],
        *,
        settled: Callable[[ProbeResult], bool],
        attempts: int = 5,
    ) -> ProbeResult:
        """`probe` through a port-forward of its own to `port` of `target`, again (on a new
        port-forward) until `settled` says its result is the server's and not the way's, at most
        `attempts` times; the last result. kubectl port-forward and a relay pod may drop a
        connection on a loaded machine, and a connection the server reset may break the
        port-forward for the next one."""
        for attempt in range(attempts):
            with self.port_forward(namespace, target, (port,)) as ports:
                result = probe(ports[port])
            if settled(result):
                break
            time.sleep(1 + attempt)
        return result


def push_image(layout: Path, reference: str, destination: str, scratch: Path) -> str:
    """Copies image `reference` of the OCI layout to `destination` (registry/name:tag, plain
    HTTP) and returns it named by its pushed digest (registry/name@sha256:...)."""
    digest_file = scratch / (re.sub(r"[^A-Za-z0-9.-]", "_", destination) + ".digest")
    result = subprocess.run(  # noqa: S603 - skopeo from PATH, as the user runs it
        [  # noqa: S607
            "skopeo", "copy", "--quiet", "--dest-tls-verify=false",
            "--digestfile", str(digest_file), f"oci:{layout}:{reference}", f"docker://{destination}",
        ],
        capture_output=True, timeout=PUSH_TIMEOUT, check=False,
    )  # fmt: skip
    if result.returncode:
        raise KubeError(f"skopeo copy {reference}: {result.stderr.decode(errors='replace')[-300:]}")
    return f"{destination.rpartition(':')[0]}@{digest_file.read_text().strip()}"


def push_release(layout: Path, registry: str, scratch: Path) -> dict[str, str]:
    """Pushes every release image of `layout` to `registry`; {release reference: pushed}."""
    index = json.loads((layout / "index.json").read_text())
    references = sorted(
        m.get("annotations", {}).get("org.opencontainers.image.ref.name", "")
        for m in index["manifests"]
    )
    return {
        reference: push_image(
            layout, reference, f"{registry}/{reference.removeprefix(RELEASE_PREFIX)}", scratch
        )
        for reference in references
        if reference.startswith(RELEASE_PREFIX)
    }
