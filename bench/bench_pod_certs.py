"""Mesh certificates per second from pods, on the test cluster (issue 26).

The Coordinator runs as users deploy it: this checkout's release images pushed by digest, the
StatefulSet of `contrast coordinator-resources` under the emulated confidential runtime,
`contrast generate`, `kubectl apply`, `contrast set` through the port-forwarder pod. Then one
Deployment of PODS generated workload pods (each with its injected Initializer, as generate
writes it) whose app container loops on the Initializer's own request
(`contrast.initializer.client.request_mesh_certificate`: a fresh attested channel, GetNonce,
evidence from the pod's TEE socket for a fresh P-256 key, NewMeshCert) against the
`coordinator-ready` Service, printing one line per certificate, and one per failed attempt,
which it retries after 50 ms (the Initializer backs off from 0.5 s: the bench asks what the
Coordinators answer, not how long a client waits). Measured over a fixed window
once every pod runs: the certificates the pods' logs count in it, and the Coordinator's own
`contrast_meshapi_certificates_issued` read from each replica's /metrics (port 9102, through
`kubectl port-forward`) before and after. The pods' count is the figure and its ratio to the
floor is printed. With mesh workers the metric counts the workers' certificates too since
8f085c7 (each reports its counters to the Coordinator over its pipe, at most a second behind);
before, it was the Coordinator process's alone.

Floor, in the same run: the same PODS loops as host processes against one Coordinator process on
loopback (the local demo's, emulated SNP, manifest set) for the same window: the certificates the
same client code gets with no cluster, no pod network and no runtime in between. Printed: both
rates and their ratio.

`--replicas R` sets the StatefulSet's replica count (not part of any policy); `--mesh-workers N`
gives the Coordinator container `CONTRAST_MESH_WORKERS=N` in its YAML before `generate` (so the
policy allows it), as a user would; neither changes what `coordinator-resources` prints.

Run as root: `.venv/bin/python -m bench.bench_pod_certs [--cluster DIR] [--images DIR]
[--pods N] [--seconds S] [--rounds K] [--replicas R] [--mesh-workers N]`. `--cluster` (default
CONTRAST_TEST_CLUSTER) names a cluster already up; without it one is brought up in a temporary
folder and taken down after. `--images` (default CONTRAST_TEST_IMAGES) names a release layout
built from this checkout; without it the images are built (a few minutes). The namespace is
deleted at the end.

Measured (shared 2-core host, other helpers' clusters and builds running, 8 pods, 20 s windows):
1 replica 91.6 / 92.9 per s against a floor of 80.6 (1.14x, 1.15x; the pods' evidence comes from
the node's TEE server, the floor's clients sign their own); 1 replica with one mesh worker 63.7 /
80.4 per s against 99.7 (0.64x, 0.81x; the metric shows only the Coordinator process's half,
30.9 / 40.6); 3 replicas 29.3 / 25.1 per s against 156.9 (0.19x, 0.16x), with 1113 / 1011
failed attempts in the window: the request pins the certificate that `fetch_certificate` got
from one replica, and its next connection through the `coordinator-ready` Service reaches
another replica two times in three, whose own certificate fails the pinned handshake
(CERTIFICATE_VERIFY_FAILED). The floor itself moved 80-157 per s between runs with the load.

Again after b6398fa (the Initializer pins the fetched certificate again at once when the pinned
connection reaches another replica): the bench, CLI and cluster.sh of a clean copy of 8f085c7, the
images built from the tree at a05573e, same 8 pods and 20 s windows, the host's load average
9-25 (uptime at the runs' starts and ends; other helpers' builds and clusters): 1 replica
26.1 / 27.8 per s against a floor of 81.1 (0.32x, 0.34x); 3 replicas 7.4 / 4.2 per s against
58.5 (0.13x, 0.07x). The metric agreed with the pods' count in every window, and the pods' logs
show no failed attempt (before: 1113 / 1011 a window, all CERTIFICATE_VERIFY_FAILED). The loops
do not count the re-pins inside one request (a fetch and a handshake more for each connection
that reaches another replica, two in three on average). A second run with the loop counting its
`fetch_certificate` calls (a local patch, not in this file), load average 27-35: 3 replicas
189 / 113 certificates in the windows (9.5 / 5.7 per s) for 573 / 305 fetches, 3.0 and 2.7 a
certificate, as expected (that run's floor is lost: deleting the namespace timed out at that
load); 1 replica 15.7 / 19.4 per s against a floor of 103.2 (0.15x, 0.19x), one fetch a
certificate. So each certificate from 3 replicas costs about three fetches and handshakes, two
of them with a replica that is not the pinned one. One replica, which the re-pin does not touch,
has given 15.7 to 92.9 per s on this shared host: the load, not the tree, sets these figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' cluster helpers
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's own helpers

from tests.kube import deploy
from tests.kube.cluster import Cluster, install_emulated_runtime
from tests.kube.flow import deployment_yaml

from bench_history_api import cluster
from contrast.cli.main import main as contrast
from contrast.local.kubedemo import export_node_roots
from replicas import replicas_with_manifest

PLATFORM = "emulated-snp"
METRICS_PORT = 9102
COORDINATORS = "app.kubernetes.io/name=coordinator"
LOADER = "certloader"
TIMEOUT = 300.0
STAMP = re.compile(r"\d+\.\d+")
METRIC = re.compile(r"^contrast_meshapi_certificates_issued_total (\S+)$", re.MULTILINE)

# The loop of a pod (and of a floor client): the Initializer's request, over and over.
LOOP = """\
import sys, time
from cryptography.hazmat.primitives.asymmetric import ec
from contrast.atls.issuers import TeeKind, make_issuer
from contrast.initializer.client import request_mesh_certificate
target, kind = sys.argv[1], TeeKind(sys.argv[2])
state, digest = (sys.argv[3], bytes.fromhex(sys.argv[4])) if len(sys.argv) > 4 else (None, None)
from pathlib import Path
issuer = make_issuer(kind, state_dir=state and Path(state), policy_hash=digest)
end = time.time() + float(sys.argv[5]) if len(sys.argv) > 5 else float("inf")
while time.time() < end:
    try:
        request_mesh_certificate(target, issuer, ec.generate_private_key(ec.SECP256R1()))
    except Exception as error:
        message = str(error).replace("\\n", " ")[:300]
        print(f"error {time.time():.3f} {type(error).__name__}: {message}", flush=True)
        time.sleep(0.05)
        continue
    print(f"{time.time():.3f}", flush=True)
"""


def cli(*arguments: str) -> str:
    """`contrast ARGUMENTS` in this process; its stdout (its one-line error ends the bench)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = contrast(list(arguments))
    if code:
        raise SystemExit(f"contrast {arguments[0]} exited {code}")
    return out.getvalue()


def image_of(replacements: Path, name: str) -> str:
    (pushed,) = [
        line.partition("=")[2]
        for line in replacements.read_text().splitlines()
        if f"/{name}@" in line
    ]
    return pushed


def coordinator_yaml(text: str, replicas: int, mesh_workers: int | None) -> bytes:
    """coordinator-resources' YAML with the user's two knobs: the replica count and, in the
    container's env before generate, CONTRAST_MESH_WORKERS."""
    documents = deploy.documents_of(text)
    (statefulset,) = [d for d in documents if d["kind"] == "StatefulSet"]
    statefulset["spec"]["replicas"] = replicas
    if mesh_workers is not None:
        (container,) = [
            c for c in statefulset["spec"]["template"]["spec"]["containers"]
            if c["name"] == "coordinator"
        ]  # fmt: skip
        container.setdefault("env", []).append(
            {"name": "CONTRAST_MESH_WORKERS", "value": str(mesh_workers)}
        )
    return deploy.dump(documents)


def issued(ports: list[int]) -> float:
    """contrast_meshapi_certificates_issued summed over the replicas' /metrics."""
    total = 0.0
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            found = METRIC.search(response.read().decode())
        if found is None:
            raise SystemExit("a replica's /metrics has no contrast_meshapi_certificates_issued")
        total += float(found.group(1))
    return total


def counted(kube: Cluster, namespace: str, began: float, ended: float) -> tuple[int, Counter[str]]:
    """Certificates the pods' logs stamp within [began, ended], and the errors they printed in
    it, by message (the Initializer retries them; the loop after a second)."""
    names = kube.kubectl(
        "-n", namespace, "get", "pods", "-l", f"app.kubernetes.io/name={LOADER}", "-o", "name"
    ).stdout.decode().split()  # fmt: skip
    certificates, errors = 0, Counter[str]()
    for name in names:
        log = kube.kubectl("-n", namespace, "logs", name, "-c", "loop").stdout.decode()
        for line in log.splitlines():
            if line.startswith("error "):
                _, stamp, message = line.split(" ", 2)
                if began <= float(stamp) <= ended:
                    errors[message] += 1
            elif STAMP.fullmatch(line) and began <= float(line) <= ended:
                certificates += 1  # (gRPC's own log lines on stderr are neither)
    return certificates, errors


@contextlib.contextmanager
def forwards(kube: Cluster, namespace: str, replicas: int) -> Iterator[list[int]]:
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(
                deploy.port_forward(kube, namespace, f"pod/coordinator-{index}", METRICS_PORT)
            )
            for index in range(replicas)
        ]


def floor(pods: int, seconds: float) -> float:
    """Certificates per second of `pods` host processes running LOOP against one Coordinator
    process on loopback (emulated SNP, the local demo's manifest set) for `seconds`."""
    from contrast.local.demo import SERVER  # noqa: PLC0415

    with replicas_with_manifest(1) as demo:
        target = f"127.0.0.1:{demo.replicas[0].mesh}"
        arguments = [target, PLATFORM, str(demo.state / "tee"), SERVER.policy_hash.hex()]
        clients = [
            subprocess.Popen(
                [sys.executable, "-c", LOOP, *arguments, str(seconds + 30)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(pods)
        ]
        time.sleep(15)  # every client started and past its first certificate
        began = time.time()
        time.sleep(seconds)
        ended = time.time()
        stamps = []
        for client in clients:
            out, _ = client.communicate(timeout=seconds + 120)
            stamps += [float(line) for line in out.splitlines() if STAMP.fullmatch(line)]
    return sum(began <= stamp <= ended for stamp in stamps) / (ended - began)


def deploy_and_measure(
    kube: Cluster, layout: Path, work: Path, options: argparse.Namespace
) -> list[tuple[float, float, Counter[str]]]:
    """Deploys the Coordinator and the loader pods; per round (rate from the pods' logs, rate
    from the Coordinator's metric, errors the pods printed)."""
    handler = install_emulated_runtime(kube, PLATFORM)
    namespace = kube.namespace("bench-certs")
    try:
        replacements = deploy.push_release(layout, kube.registry, work)
        coordinator = image_of(replacements, "coordinator")
        resources = work / "workspace" / "resources"
        resources.mkdir(parents=True)
        printed = cli(
            "coordinator-resources", "--platform", PLATFORM, "--namespace", namespace,
            "--image-replacements", str(replacements),
        )  # fmt: skip
        (resources / "coordinator.yml").write_bytes(
            coordinator_yaml(printed, options.replicas, options.mesh_workers)
        )
        command = [deploy.IMAGE_PYTHON, "-c", LOOP, "coordinator-ready:7777", "emulated"]
        (resources / "loader.yml").write_text(deployment_yaml(
            LOADER, namespace, coordinator, command, container="loop", replicas=options.pods,
            memory="120Mi",
        ))  # fmt: skip
        export_node_roots(work / "node-roots")
        cli(
            "generate", "--workspace-dir", str(work / "workspace"), "--reference-values", PLATFORM,
            "--emulated-tee", str(work / "node-roots"), "--image-replacements", str(replacements),
            "--oci-layout", str(layout), "--insecure-registry", kube.registry, str(resources),
        )  # fmt: skip
        documents = [
            *deploy.documents_of((resources / "coordinator.yml").read_text()),
            *deploy.documents_of((resources / "loader.yml").read_text()),
            deploy.forwarder_pod(namespace, coordinator),
        ]
        assert handler.encode() in deploy.dump(documents)
        kube.kubectl("apply", "-f", "-", input=deploy.dump(documents))
        deploy.wait_started(kube, namespace, COORDINATORS, options.replicas, TIMEOUT)
        forwarder = f"app.kubernetes.io/name={deploy.FORWARDER_NAME}"
        deploy.wait_ready(kube, namespace, forwarder, 1, TIMEOUT)
        with deploy.port_forward(
            kube, namespace, f"pod/{deploy.FORWARDER_NAME}", deploy.USER_API_PORT
        ) as port:
            workspace = work / "workspace"
            cli("set", "-c", f"127.0.0.1:{port}", "--workspace-dir", str(workspace), str(resources))
        deploy.wait_ready(kube, namespace, COORDINATORS, options.replicas, TIMEOUT)
        deploy.wait_ready(
            kube, namespace, f"app.kubernetes.io/name={LOADER}", options.pods, TIMEOUT
        )
        print(f"{options.pods} loader pods Ready, {options.replicas} replica(s)", file=sys.stderr)
        time.sleep(10)  # every loop past its first certificates
        results = []
        with forwards(kube, namespace, options.replicas) as ports:
            for _ in range(options.rounds):
                before, began = issued(ports), time.time()
                time.sleep(options.seconds)
                after, ended = issued(ports), time.time()
                pods, errors = counted(kube, namespace, began, ended)
                results.append((pods / (ended - began), (after - before) / (ended - began), errors))
        return results
    finally:
        kube.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=120s", check=False)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_pod_certs", description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default=os.environ.get("CONTRAST_TEST_CLUSTER"))
    parser.add_argument("--images", default=os.environ.get("CONTRAST_TEST_IMAGES"))
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--mesh-workers", type=int, default=None)
    options = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_pod_certs needs root (the cluster makes a network namespace and mounts)")
        return 1
    if options.cluster:
        os.environ["CONTRAST_TEST_CLUSTER"] = options.cluster
    with tempfile.TemporaryDirectory(prefix="bench-certs-") as scratch:
        work = Path(scratch)
        if options.images:
            layout = Path(options.images).resolve()
        else:
            from tests.imagebuild.builder import build_into  # noqa: PLC0415

            layout = build_into(work / "layout").layout
        with cluster() as kube:
            rounds = deploy_and_measure(kube, layout, work, options)
    base = floor(options.pods, options.seconds)
    workers = "0 (as printed)" if options.mesh_workers is None else str(options.mesh_workers)
    print(
        f"{options.pods} pods, {options.replicas} Coordinator replica(s), mesh workers {workers},"
        f" {options.rounds} windows of {options.seconds:.0f} s"
    )
    print(f"floor: {options.pods} host processes, one Coordinator on loopback  {base:7.1f}/s")
    for index, (pods, metric, errors) in enumerate(rounds, 1):
        print(
            f"window {index}: pods' logs {pods:7.1f}/s ({pods / base:.2f}x the floor),"
            f" Coordinator metric {metric:7.1f}/s; {errors.total()} errors in the pods' logs"
        )
        for message, count in errors.most_common(3):
            print(f"    {count} x {message}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
