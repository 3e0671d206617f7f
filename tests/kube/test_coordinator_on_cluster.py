"""The Coordinator on the real cluster, deployed as a user deploys it, and the user's first steps.

The cluster gets the emulated-snp confidential runtime from the project's node installer
(`cluster.sh install-runtime`); the user takes its emulated roots' public part
(`contrast-emulated-runtime setup --public`, as they would take AMD's) for `generate`. The release
images of this checkout are pushed by digest into the cluster's registry;
`contrast coordinator-resources --platform emulated-snp --image-replacements FILE` is applied as
printed (three replicas of a StatefulSet, ServiceAccount, Role, RoleBinding, the Services), after
`contrast generate --reference-values emulated-snp` has given the Coordinator and the workloads
their initdata. Every Coordinator and workload pod runs under the emulated runtime's RuntimeClass:
each container checked against its pod's policy, and the TEE each pod attests with is the runtime's,
its HOSTDATA the pod's initdata digest fixed by the node. The user reaches the Coordinator through
the `port-forwarder-coordinator` pod and `kubectl port-forward`, and `contrast set`, `verify` and
`recover` attest it from the workstation.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509

from contrast.cli.main import main
from contrast.emulatedruntime.node import DEFAULT_ROOTS, ROOTS_ENV
from contrast.policy import initdata
from tests.kube import deploy
from tests.kube.cluster import Cluster, install_emulated_runtime
from tests.kube.flow import deployment_yaml

PLATFORM = "emulated-snp"
COORDINATOR_SELECTOR = "app.kubernetes.io/name=coordinator"
READY_TIMEOUT = 240
# Where the node installer puts the emulated roots on a node (and so on this host).
NODE_ROOTS = Path(DEFAULT_ROOTS)
# A workload of the user's: the Coordinator's image has Python (the only image at hand whose
# pulls need no network); generate injects the Initializer, which gets the pod's mesh certificate.
# The policy allows no `kubectl exec`, so the app prints the chain the Initializer left it.

WEB_SCRIPT = (
    "import sys, time; sys.stdout.write(open('/contrast/tls-config/certChain.pem').read());"
    " sys.stdout.flush(); time.sleep(1e9)"
)


@dataclass(frozen=True)
class Deployment:
    cluster: Cluster
    namespace: str
    workspace: Path
    replacements: Path
    handler: str
    coordinator_hash: str
    swapped_hash: str  # the policy hash of the pod whose initdata was swapped


def run_cli(*arguments: str) -> None:
    """Runs the CLI in this process (as a user's shell would run `contrast ...`); fails with its
    exit code when it does not succeed (its one-line error is in the captured stderr)."""
    code = main(list(arguments))
    assert code == 0, f"contrast {' '.join(arguments)} exited {code}"


def node_roots_public(directory: Path) -> Path:
    """The node's emulated roots' certificates, as a user exports them from a node."""
    subprocess.run(
        [sys.executable, "-m", "contrast.emulatedruntime", "setup", "--public", str(directory)],
        env={**os.environ, ROOTS_ENV: str(NODE_ROOTS)}, check=True, capture_output=True,
        timeout=60,
    )  # fmt: skip
    return directory


@pytest.fixture(scope="module")
def deployment(
    kube_cluster: Cluster, release_layout: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("k8s-e2e")
    cluster = kube_cluster
    handler = install_emulated_runtime(cluster, PLATFORM)
    namespace = cluster.namespace("e2e")
    replacements = deploy.push_release(release_layout, cluster.registry, root)

    workspace = root / "workspace"
    resources = workspace / "resources"
    resources.mkdir(parents=True)
    coordinator_yml = resources / "coordinator.yml"
    coordinator_yml.write_text(_capture_cli(
        "coordinator-resources", "--platform", PLATFORM, "--namespace", namespace,
        "--image-replacements", str(replacements),
    ))  # fmt: skip
    # web, and web-swapped: the same workload, whose initdata is swapped after generate.
    (resources / "web.yml").write_text("---\n".join(
        deployment_yaml(name, namespace, _image_of(replacements),
                        [deploy.IMAGE_PYTHON, "-c", WEB_SCRIPT], container="web",
                        grace_seconds=None, memory="50Mi")
        for name in ("web", "web-swapped")
    ))  # fmt: skip
    run_cli(
        "generate", "--workspace-dir", str(workspace), "--reference-values", PLATFORM,
        "--emulated-tee", str(node_roots_public(root / "node-roots")),
        "--image-replacements", str(replacements), "--oci-layout", str(release_layout),
        "--insecure-registry", cluster.registry, str(resources),
    )  # fmt: skip

    documents = deploy.documents_of(coordinator_yml.read_text())
    (statefulset,) = [d for d in documents if d["kind"] == "StatefulSet"]
    assert statefulset["spec"]["template"]["spec"]["runtimeClassName"] == handler
    coordinator_hash = initdata.policy_hash(deploy.pod_initdata(statefulset)).hex()
    manifest = json.loads((workspace / "manifest.json").read_text())
    assert manifest["Policies"][coordinator_hash]["Role"] == "coordinator"

    web, swapped = deploy.documents_of((resources / "web.yml").read_text())
    web_hash = initdata.policy_hash(deploy.pod_initdata(web)).hex()
    assert "Role" not in manifest["Policies"][web_hash]  # a workload, not a Coordinator
    # web-swapped's initdata swapped after generate (a rule more in its policy, which still
    # lets its containers start): the runtime's TEE reports that initdata's digest, which no
    # policy of the manifest has.
    swapped_initdata = deploy.pod_initdata(swapped).replace(
        b"package agent_policy", b"package agent_policy\n\ndefault SwappedRequest := true", 1
    )
    assert swapped_initdata != deploy.pod_initdata(swapped)
    assert initdata.policy_hash(swapped_initdata).hex() not in manifest["Policies"]
    annotations = swapped["spec"]["template"]["metadata"]["annotations"]
    annotations[initdata.ANNOTATION] = initdata.encode_annotation(swapped_initdata)
    try:
        cluster.kubectl("apply", "-f", "-", input=deploy.dump([*documents, web, swapped]))
        yield Deployment(
            cluster, namespace, workspace, replacements, handler, coordinator_hash,
            initdata.policy_hash(swapped_initdata).hex(),
        )  # fmt: skip
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _image_of(replacements: Path, name: str = "coordinator") -> str:
    """The pushed digest reference of a release image, from the replacements file."""
    (pushed,) = [
        line.partition("=")[2]
        for line in replacements.read_text().splitlines()
        if f"/{name}@" in line
    ]
    return pushed


def _capture_cli(*arguments: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_cli(*arguments)
    return out.getvalue()


def test_coordinator_statefulset_set_and_verify_through_the_port_forwarder(
    deployment: Deployment,
) -> None:
    cluster, namespace, workspace = deployment.cluster, deployment.namespace, deployment.workspace
    started = time.monotonic()
    # Before a manifest the replicas have started but are not Ready (the readiness probe says
    # 503 until there is a manifest, as the original's): the `coordinator` Service publishes
    # them anyway (publishNotReadyAddresses), so that `set` can reach one.
    deploy.wait_started(cluster, namespace, COORDINATOR_SELECTOR, 3, READY_TIMEOUT)
    print(f"3 Coordinator replicas started in {time.monotonic() - started:.1f} s")
    ids = cluster.kubectl(
        "-n", namespace, "get", "pods", "-l", COORDINATOR_SELECTOR,
        "-o", "jsonpath={.items[*].status.containerStatuses[*].imageID}",
    ).stdout.decode().split()  # fmt: skip
    pushed = _image_of(deployment.replacements)
    assert len(ids) == 3
    assert {image_id.rpartition("@")[2] for image_id in ids} == {pushed.rpartition("@")[2]}

    forwarder = deploy.forwarder_pod(namespace, pushed)
    cluster.kubectl("apply", "-f", "-", input=deploy.dump([forwarder]))
    deploy.wait_ready(cluster, namespace, f"app.kubernetes.io/name={deploy.FORWARDER_NAME}", 1, 120)

    with deploy.port_forward(
        cluster, namespace, f"pod/{deploy.FORWARDER_NAME}", deploy.USER_API_PORT
    ) as port:
        address = f"127.0.0.1:{port}"
        began = time.monotonic()
        if main(
            ["set", "-c", address, "--workspace-dir", str(workspace), str(workspace / "resources")]
        ):
            pytest.fail(
                f"contrast set failed (its error above)\n{deploy.describe(cluster, namespace)}"
            )
        print(f"contrast set through the port-forwarder: {time.monotonic() - began:.1f} s")
        # The replicas that did not take the manifest see it in the history, have no seed and
        # recover it from a Ready peer (the one that took it) within their peer interval; Ready
        # then. Until that, `verify` may meet one in recovery mode.
        deploy.wait_ready(cluster, namespace, COORDINATOR_SELECTOR, 3, READY_TIMEOUT)
        print(f"3 Coordinator replicas Ready {time.monotonic() - started:.1f} s after apply")
        run_cli("verify", "-c", address, "--workspace-dir", str(workspace))
    verify = workspace / "verify"
    assert (verify / "manifest.0.json").read_bytes() == (workspace / "manifest.json").read_bytes()
    mesh_ca = (verify / "mesh-ca.pem").read_bytes()

    # The workload's Initializer got its mesh certificate from the Coordinator: the chain
    # the app container reads (and prints: its policy allows no exec) is issued by the mesh CA
    # that verify fetched.
    deploy.wait_ready(cluster, namespace, "app.kubernetes.io/name=web", 1, READY_TIMEOUT)
    chain = cluster.kubectl("-n", namespace, "logs", "deploy/web", "-c", "web").stdout
    leaf = x509.load_pem_x509_certificates(chain)[0]
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(mesh_ca))
    print(f"web's mesh certificate: {leaf.subject.rfc4514_string()}, issued by the mesh CA")
    # The pod whose initdata was swapped got none: its Initializer was refused for good.
    refusal = _wait_for_log(
        cluster, namespace, "deploy/web-swapped", container="contrast-initializer",
        text="refused a mesh certificate", timeout=READY_TIMEOUT,
    )  # fmt: skip
    print(f"web-swapped: {refusal}")
    assert f"PERMISSION_DENIED: policy hash {deployment.swapped_hash} is not in" in refusal
    started = cluster.kubectl(
        "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/name=web-swapped",
        "-o", "jsonpath={.items[*].status.containerStatuses[*].started}",
    ).stdout.decode()  # fmt: skip
    assert "true" not in started  # its app container never ran
    runtime_classes = cluster.kubectl(
        "-n", namespace, "get", "pods", "-l", f"{COORDINATOR_SELECTOR}",
        "-o", "jsonpath={.items[*].spec.runtimeClassName}",
    ).stdout.decode().split()  # fmt: skip
    assert runtime_classes == [deployment.handler] * 3

    for replica in ("coordinator-0", "coordinator-1", "coordinator-2"):
        log = cluster.kubectl("-n", namespace, "logs", replica).stdout.decode()
        said = [line for line in log.splitlines() if "recover" in line or "manifest set" in line]
        print(f"{replica}: {said}")

    # A replica deleted is recreated by the StatefulSet and rejoins by peer recovery (no
    # `contrast recover`): Ready again, its log says from which peer, and the deployment
    # still verifies with the same mesh CA.
    restarted = "coordinator-1"
    uid = _uid(cluster, namespace, restarted)
    cluster.kubectl("-n", namespace, "delete", "pod", restarted, "--wait=true")
    began = time.monotonic()
    deadline = began + READY_TIMEOUT
    while _uid(cluster, namespace, restarted) in ("", uid):
        assert time.monotonic() < deadline, f"{restarted} was not recreated"
        time.sleep(1)
    deploy.wait_ready(cluster, namespace, COORDINATOR_SELECTOR, 3, READY_TIMEOUT)
    print(f"{restarted} deleted, recreated and Ready in {time.monotonic() - began:.1f} s")
    log = cluster.kubectl("-n", namespace, "logs", restarted).stdout.decode()
    assert "recovered from the peer Coordinator at" in log, log
    (verify / "mesh-ca.pem").unlink()
    with deploy.port_forward(
        cluster, namespace, f"pod/{deploy.FORWARDER_NAME}", deploy.USER_API_PORT
    ) as port:
        run_cli("verify", "-c", f"127.0.0.1:{port}", "--workspace-dir", str(workspace))
    assert (verify / "mesh-ca.pem").read_bytes() == mesh_ca

    # All replicas scaled to 0 and back: none has the seed and no peer can give it, so they
    # wait for `contrast recover` (not Ready meanwhile), which the user sends through the
    # port-forwarder; the replica it reached gives the others the seed by peer recovery, and
    # the deployment verifies with the same mesh CA.
    cluster.kubectl("-n", namespace, "scale", "statefulset/coordinator", "--replicas=0")
    cluster.kubectl("-n", namespace, "wait", "--for=delete", "pod", "-l", COORDINATOR_SELECTOR,
                    f"--timeout={READY_TIMEOUT}s")  # fmt: skip
    began = time.monotonic()
    cluster.kubectl("-n", namespace, "scale", "statefulset/coordinator", "--replicas=3")
    deploy.wait_started(cluster, namespace, COORDINATOR_SELECTOR, 3, READY_TIMEOUT)
    print(f"3 replicas back from 0, started in {time.monotonic() - began:.1f} s")
    for replica in ("coordinator-0", "coordinator-1", "coordinator-2"):
        ready = cluster.kubectl(
            "-n", namespace, "get", "pod", replica,
            "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        ).stdout.decode()  # fmt: skip
        assert ready != "True", f"{replica} is Ready without its seed"
    with deploy.port_forward(
        cluster, namespace, f"pod/{deploy.FORWARDER_NAME}", deploy.USER_API_PORT
    ) as port:
        recovered = time.monotonic()
        run_cli("recover", "-c", f"127.0.0.1:{port}", "--workspace-dir", str(workspace))
        print(f"contrast recover through the port-forwarder: {time.monotonic() - recovered:.1f} s")
        deploy.wait_ready(cluster, namespace, COORDINATOR_SELECTOR, 3, READY_TIMEOUT)
        print(f"3 replicas Ready {time.monotonic() - began:.1f} s after scaling back")
        (verify / "mesh-ca.pem").unlink()
        run_cli("verify", "-c", f"127.0.0.1:{port}", "--workspace-dir", str(workspace))
    assert (verify / "mesh-ca.pem").read_bytes() == mesh_ca
    logs = "".join(
        cluster.kubectl("-n", namespace, "logs", replica).stdout.decode()
        for replica in ("coordinator-0", "coordinator-1", "coordinator-2")
    )
    assert "recovered from the peer Coordinator at" in logs, logs


def _uid(cluster: Cluster, namespace: str, pod: str) -> str:
    result = cluster.kubectl(
        "-n", namespace, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}", check=False
    )
    return result.stdout.decode().strip() if result.returncode == 0 else ""


def _wait_for_log(
    cluster: Cluster, namespace: str, target: str, *, container: str, text: str, timeout: float
) -> str:
    """The first line of `container`'s log (this run's or the previous one's) holding `text`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for previous in ("--previous=false", "--previous=true"):
            result = cluster.kubectl(
                "-n", namespace, "logs", target, "-c", container, previous, check=False
            )
            for line in result.stdout.decode(errors="replace").splitlines():
                if text in line:
                    return line
        time.sleep(2)
    pytest.fail(
        f"{target}/{container}: no {text!r} in {timeout:.0f} s\n"
        + deploy.describe(cluster, namespace)
    )
