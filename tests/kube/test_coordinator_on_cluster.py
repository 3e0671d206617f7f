"""The Coordinator on the real cluster, deployed as a user deploys it, and the user's first steps.

The release images of this checkout are pushed by digest into the cluster's registry;
`contrast coordinator-resources --platform emulated-snp --image-replacements FILE` is applied as
printed (three replicas of a StatefulSet, ServiceAccount, Role, RoleBinding, the Services),
after `contrast generate --reference-values emulated-snp` has given the Coordinator its initdata;
the user reaches it through the `port-forwarder-coordinator` pod and `kubectl port-forward`, and
`contrast set` and `contrast verify` attest it from the workstation.

The one stand-in (tests/kube/deploy.py says why): the pods run on the cluster's plain runc with
the emulated TEE's socket served by the test, HOSTDATA fixed from each pod's initdata, and not
under the emulated confidential runtime, which checks every container against its policy.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509

from contrast.cli.main import main
from contrast.policy import initdata
from tests.imagebuild.builder import BuiltImages
from tests.kube import deploy
from tests.kube.cluster import Cluster

PLATFORM = "emulated-snp"
COORDINATOR_SELECTOR = "app.kubernetes.io/name=coordinator"
READY_TIMEOUT = 240
# A workload of the user's: the Coordinator's image has Python (the only image at hand whose
# pulls need no network); generate injects the Initializer, which gets the pod's mesh certificate.
WEB = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {namespace}
spec:
  replicas: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: web
  template:
    metadata:
      labels:
        app.kubernetes.io/name: web
    spec:
      runtimeClassName: contrast-cc
      containers:
        - name: web
          image: {image}
          command: ["/usr/bin/python3.11", "-c", "import time; time.sleep(1e9)"]
          resources:
            limits:
              memory: 50Mi
            requests:
              memory: 50Mi
"""


@dataclass(frozen=True)
class Deployment:
    cluster: Cluster
    namespace: str
    workspace: Path
    replacements: Path
    coordinator_hash: str
    swapped_hash: str  # the policy hash of the pod whose initdata was swapped


def run_cli(*arguments: str) -> None:
    """Runs the CLI in this process (as a user's shell would run `contrast ...`); fails with its
    exit code when it does not succeed (its one-line error is in the captured stderr)."""
    code = main(list(arguments))
    assert code == 0, f"contrast {' '.join(arguments)} exited {code}"


@pytest.fixture(scope="module")
def release_layout(request: pytest.FixtureRequest) -> Path:
    """This checkout's release images: the session's `built_images` (built once, about three
    minutes with the wheel cache of tests/imagebuild). CONTRAST_TEST_IMAGES=DIR names a layout
    already built from this checkout by `contrast-build-images --output DIR` (while
    developing)."""
    reuse = os.environ.get("CONTRAST_TEST_IMAGES")
    if reuse:
        return Path(reuse).resolve()
    built: BuiltImages = request.getfixturevalue("built_images")
    return built.layout


@pytest.fixture(scope="module")
def deployment(
    kube_cluster: Cluster, release_layout: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("k8s-e2e")
    os.chmod(root, 0o755)  # the TEE socket's folder below is a hostPath of the pods
    cluster = kube_cluster
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
    (resources / "web.yml").write_text(
        WEB.format(namespace=namespace, image=_image_of(replacements))
    )
    run_cli(
        "generate", "--workspace-dir", str(workspace), "--reference-values", PLATFORM,
        "--image-replacements", str(replacements), "--oci-layout", str(release_layout),
        "--insecure-registry", cluster.registry, str(resources),
    )  # fmt: skip

    documents = deploy.documents_of(coordinator_yml.read_text())
    (statefulset,) = [d for d in documents if d["kind"] == "StatefulSet"]
    coordinator_initdata = deploy.pod_initdata(statefulset)
    coordinator_hash = initdata.policy_hash(coordinator_initdata).hex()
    manifest = json.loads((workspace / "manifest.json").read_text())
    assert manifest["Policies"][coordinator_hash]["Role"] == "coordinator"

    web = deploy.documents_of((resources / "web.yml").read_text())
    web_hash = initdata.policy_hash(deploy.pod_initdata(web[0])).hex()
    assert "Role" not in manifest["Policies"][web_hash]  # a workload, not a Coordinator

    # One emulated TEE per initdata, as the emulated runtime gives one per pod.
    tee = deploy.TeeStandIn(
        workspace / "emulated-tee", coordinator_initdata, root / "tee-coordinator"
    )
    web_tee = deploy.TeeStandIn(
        workspace / "emulated-tee", deploy.pod_initdata(web[0]), root / "tee-web"
    )
    # The same pod with its initdata swapped after generate (a rule more in its policy): the
    # runtime's TEE reports that initdata's digest, which no policy of the manifest has.
    swapped_initdata = deploy.pod_initdata(web[0]).replace(
        b"package agent_policy", b"package agent_policy\n\ndefault SwappedRequest := true", 1
    )
    assert swapped_initdata != deploy.pod_initdata(web[0])
    assert initdata.policy_hash(swapped_initdata).hex() not in manifest["Policies"]
    swapped = deploy.renamed(web[0], "web-swapped")
    annotations = swapped["spec"]["template"]["metadata"]["annotations"]
    annotations[initdata.ANNOTATION] = initdata.encode_annotation(swapped_initdata)
    swapped_tee = deploy.TeeStandIn(
        workspace / "emulated-tee", swapped_initdata, root / "tee-web-swapped"
    )
    applied = [
        deploy.plain_runc_with_emulated_tee(d, tee.directory) if d is statefulset else d
        for d in documents
    ] + [
        deploy.plain_runc_with_emulated_tee(web[0], web_tee.directory),
        deploy.plain_runc_with_emulated_tee(swapped, swapped_tee.directory),
    ]
    try:
        cluster.kubectl("apply", "-f", "-", input=deploy.dump(applied))
        yield Deployment(
            cluster, namespace, workspace, replacements, coordinator_hash,
            initdata.policy_hash(swapped_initdata).hex(),
        )  # fmt: skip
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        for server in (tee, web_tee, swapped_tee):
            server.close()


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
    # the app container reads is issued by the mesh CA that verify fetched.
    deploy.wait_ready(cluster, namespace, "app.kubernetes.io/name=web", 1, READY_TIMEOUT)
    chain = cluster.kubectl(
        "-n", namespace, "exec", "deploy/web", "-c", "web", "--",
        deploy.IMAGE_PYTHON, "-c",
        "import sys; sys.stdout.write(open('/contrast/tls-config/certChain.pem').read())",
    ).stdout  # fmt: skip
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
    listing = cluster.kubectl(
        "-n", namespace, "exec", "deploy/web-swapped", "-c", "web", "--",
        deploy.IMAGE_PYTHON, "-c", "import os; print(os.listdir('/contrast'))", check=False,
    )  # fmt: skip
    assert listing.returncode != 0 or "tls-config" not in listing.stdout.decode()

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
