"""A pod's start to Ready under the emulated confidential runtime, against plain runc, on the
test cluster (issue 26: the policy check's cost per container).

The same one-container busybox Pod is applied, waited for until Ready (`kubectl wait`, from
before `kubectl apply` to its return) and deleted, taking turns: once without a runtime class
(the cluster's runc: the baseline, measured in the same run) and once as `contrast generate` wrote
it for emulated-snp (`runtimeClassName` of the emulated runtime, its initdata annotation). Under
the emulated runtime each runc create, exec and delete is a Python process that builds the Kata
agent request and evaluates it against the pod's policy (the sandbox's create also starts the
pod's TEE server), so the difference over two containers (the sandbox's pause and the app) is
what the check costs per container. Only the Pod is applied: generate needs a Coordinator among
the resources, whose image here is the same busybox (`--image-replacements`) and is never run.

Run: `.venv/bin/python bench/bench_pod_start.py [ROUNDS]` as root, with CONTRAST_TEST_CLUSTER=DIR
naming a cluster already up (`bash scripts/cluster.sh up DIR`); without it the script brings one
up in a temporary folder and takes it down after. The emulated runtime is installed into it
(`cluster.sh install-runtime`, unchanged if already there).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' cluster module
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's cluster helper

from tests.kube.cluster import Cluster, install_emulated_runtime
from tests.kube.test_policy_on_cluster import busybox_image, push

from bench_history_api import cluster
from contrast.cli.main import main as contrast

PLATFORM = "emulated-snp"
CONTAINERS = 2  # the sandbox's pause and the app: each a runc create the runtime judges
GOAL_RATIO = 3.0
POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {namespace}
spec:
  runtimeClassName: contrast-cc
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: {image}
      command: ["/bin/sh", "-c", "exec sleep 1000000"]
"""


def cli(*arguments: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = contrast(list(arguments))
    if code:
        raise SystemExit(f"contrast {' '.join(arguments)} exited {code}")
    return out.getvalue()


def start_to_ready(kube: Cluster, namespace: str, document: bytes, name: str) -> float:
    """Seconds from `kubectl apply` to the pod Ready; the pod is deleted after (not timed)."""
    began = time.perf_counter()
    kube.kubectl("-n", namespace, "apply", "-f", "-", input=document)
    kube.kubectl("-n", namespace, "wait", "--for=condition=Ready", "--timeout=100s", f"pod/{name}")
    took = time.perf_counter() - began
    kube.kubectl("-n", namespace, "delete", "pod", name, "--wait=true")
    return took


def documents(kube: Cluster, namespace: str, work: Path) -> tuple[bytes, bytes]:
    """The plain Pod and the same Pod as generate wrote it for the emulated runtime."""
    archive = work / "busybox-bench.tar"
    busybox_image(archive, "bench")
    image = push(archive, f"{kube.registry}/bench/busybox:1", work)
    printed = cli("coordinator-resources", "--platform", PLATFORM, "--namespace", namespace)
    coordinator = re.search(r"image: (\S+)", printed)
    if coordinator is None:
        raise SystemExit("coordinator-resources printed no image")
    replacements = work / "replacements.txt"
    replacements.write_text(f"{coordinator.group(1)}={image}\n")  # the Coordinator never runs
    resources = work / "workspace" / "resources"
    resources.mkdir(parents=True)
    (resources / "coordinator.yml").write_text(cli(
        "coordinator-resources", "--platform", PLATFORM, "--namespace", namespace,
        "--image-replacements", str(replacements),
    ))  # fmt: skip
    plain = POD.format(name="bench-runc", namespace=namespace, image=image)
    plain = plain.replace("  runtimeClassName: contrast-cc\n", "")
    (resources / "pod.yml").write_text(
        POD.format(name="bench-cc", namespace=namespace, image=image)
    )
    cli(
        "generate", "--workspace-dir", str(work / "workspace"), "--reference-values", PLATFORM,
        "--skip-initializer", "--insecure-registry", kube.registry, str(resources),
    )  # fmt: skip
    return plain.encode(), (resources / "pod.yml").read_bytes()


def main(argv: list[str]) -> int:
    rounds = int(argv[0]) if argv else 5
    if os.geteuid() != 0:
        print("bench_pod_start needs root (the cluster makes a network namespace and mounts)")
        return 1
    with cluster() as kube, tempfile.TemporaryDirectory(prefix="bench-pod-") as scratch:
        handler = install_emulated_runtime(kube, PLATFORM)
        namespace = kube.namespace("bench-pod")
        plain, generated = documents(kube, namespace, Path(scratch))
        assert handler.encode() in generated
        # One of each first, not counted: the image pulled, the kubelet's and Python's caches warm.
        start_to_ready(kube, namespace, plain, "bench-runc")
        start_to_ready(kube, namespace, generated, "bench-cc")
        runcs, emulated = [], []
        for index in range(rounds):
            order = [("runc", plain), ("cc", generated)]
            for kind, document in order if index % 2 == 0 else order[::-1]:
                took = start_to_ready(kube, namespace, document, f"bench-{kind}")
                (runcs if kind == "runc" else emulated).append(took)
        kube.kubectl("delete", "namespace", namespace, "--wait=false")
    runc, cc = statistics.median(runcs), statistics.median(emulated)
    print(
        f"plain runc, apply → Ready                {runc:7.2f} s  (baseline; max {max(runcs):.2f})"
    )
    print(
        f"emulated runtime ({PLATFORM}), apply → Ready {cc:7.2f} s  "
        f"({cc / runc:.2f}x runc; goal < {GOAL_RATIO:.0f}x; max {max(emulated):.2f})"
    )
    print(
        f"the policy check per container            {(cc - runc) / CONTAINERS:7.2f} s  "
        f"(the difference over {CONTAINERS} containers; {rounds} rounds, medians)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
