"""examples/mesh-app on the real cluster under the emulated confidential runtime, as users run it.

The README's "On Kubernetes" steps, in order: this checkout's release images and the app's image
pushed by digest into the cluster's registry; the emulated runtime installed on the node
(`cluster.sh install-runtime`, the node installer run from the host) and its roots' public part
given to `generate --emulated-tee`; `contrast coordinator-resources` and the example's three
services (web, api, db) in `resources/`; `contrast generate`; `kubectl apply -f resources/`;
`contrast set` and `contrast verify` through the port-forwarder pod. Every pod of the app and the
Coordinator runs under the RuntimeClass `generate` resolved (the emulated runtime checks each
container against the pod's policy and gives the pod a TEE whose HOSTDATA is its initdata's
digest). Then what a user checks, from the workstation through the app's port-forwarder:

- each Initializer got a certificate of the mesh CA `verify` saved, with its workload's name;
- a request to web (TLS checked against that mesh CA and the name `web`) goes on to api and db
  by their Service names over mutual TLS, and a note posted through web lands in db's SQLite,
  tagged under db's workload secret (which the test derives from the seed shares: the same);
- api and db refuse plain TCP, TLS without a client certificate and a forged certificate (a CA
  with the mesh CA's subject and another key), and answer the same client with a real mesh
  certificate (web's, read as the node sees the pod), so the refusals are the certificate's;
- an update: api changed (VERSION), `generate` and `set` again, a new mesh CA in `verify`; api
  rolled by the change; web, still on the old mesh CA, can no longer reach it (the design: a mesh
  CA pins one manifest); `kubectl rollout restart` of web and db; then every pod holds a
  certificate of the new mesh CA, the request crosses all three again, db's workload secret is
  unchanged (same seed, same ID), and web's old certificate is refused by the new api and db.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from contrast.cli.main import main
from contrast.client.workspace import load_seedshare_owner_key
from contrast.initializer.files import CERT_CHAIN, KEY
from contrast.local.kubecluster import KubeError
from contrast.local.meshprobe import ClientIdentity, ProbeResult, plain_probe, tls_probe
from contrast.seed.engine import SeedEngine
from contrast.seed.shares import SeedShareDocument
from tests.kube import deploy, flow
from tests.kube.cluster import Cluster, install_emulated_runtime

PLATFORM = "emulated-snp"
COORDINATOR_SELECTOR = "app.kubernetes.io/name=coordinator"
APP_FORWARDER = "port-forwarder-mesh-app"
SERVICES = ("web", "api", "db")
PORTS = {"web": 8080, "api": 8001, "db": 8002}
DB_SECRET_ID = "mesh-app-db"
KEY_LABEL = b"mesh-app notes v1"  # examples/mesh-app/meshapp.py's
READY_TIMEOUT = 300
FORWARDER_TARGET = f"pod/{APP_FORWARDER}"
NO_HTTP_ANSWER = "no HTTP answer (got '')"  # what a sidecar's TLS listener gives plain HTTP
T = TypeVar("T")
Settled = Callable[[ProbeResult], bool]


def _answered(result: ProbeResult) -> bool:
    return not result.refused


def _alerted(result: ProbeResult) -> bool:
    return result.by_alert


def _closed(result: ProbeResult) -> bool:
    return result.refusal == NO_HTTP_ANSWER


@dataclass(frozen=True)
class MeshApp:
    cluster: Cluster
    namespace: str
    workspace: Path
    resources: Path
    coordinator_image: str  # pushed by digest; the Coordinator's port-forwarder runs it
    app_image: str  # the pushed mesh-app image; the app's port-forwarder runs it
    handler: str  # the emulated runtime's handler, as install-runtime just installed it

    def cli(self, *arguments: str) -> None:
        code = main(list(arguments))
        if code:
            pytest.fail(
                f"contrast {' '.join(arguments)} exited {code} (its error above)\n"
                + deploy.describe(self.cluster, self.namespace)
            )


@pytest.fixture(scope="module")
def mesh_app(
    kube_cluster: Cluster, release_layout: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MeshApp]:
    cluster = kube_cluster
    root = tmp_path_factory.mktemp("mesh-app")
    handler = install_emulated_runtime(cluster, PLATFORM)
    namespace = cluster.namespace("mesh")
    replacements = deploy.push_release(release_layout, cluster.registry, root)
    reference, pushed = flow.push_app_image(release_layout, cluster.registry, root)
    with replacements.open("a") as lines:
        lines.write(f"{reference}={pushed}\n")

    workspace = root / "workspace"
    resources = workspace / "resources"
    resources.mkdir(parents=True)
    for name in flow.APP_FILES:
        shutil.copy(flow.EXAMPLE / name, resources / name)
    (resources / "coordinator.yml").write_text(_capture_cli(
        "coordinator-resources", "--platform", PLATFORM, "--namespace", namespace,
        "--image-replacements", str(replacements),
    ))  # fmt: skip
    roots = root / "node-roots"
    flow.export_node_roots(roots)
    (coordinator_image,) = [
        line.partition("=")[2]
        for line in replacements.read_text().splitlines()
        if line.startswith(f"{deploy.RELEASE_PREFIX}coordinator:")
    ]
    app = MeshApp(cluster, namespace, workspace, resources, coordinator_image, pushed, handler)
    generate = (
        "generate", "--workspace-dir", str(workspace), "--reference-values", PLATFORM,
        "--emulated-tee", str(roots), "--image-replacements", str(replacements),
        "--insecure-registry", cluster.registry, str(resources),
    )  # fmt: skip
    app.cli(*generate)
    try:
        cluster.kubectl("-n", namespace, "apply", "-f", str(resources))
        yield app
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _capture_cli(*arguments: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(arguments))
    assert code == 0, f"contrast {' '.join(arguments)} exited {code}"
    return out.getvalue()


def _until(what: str, attempt: Callable[[], T | None], timeout: float, app: MeshApp) -> T:
    """Retries `attempt` until it returns something; fails with the cluster's state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = attempt()
        if result is not None:
            return result
        time.sleep(2)
    pytest.fail(
        f"{what}: not within {timeout:.0f} s\n" + deploy.describe(app.cluster, app.namespace)
    )


def _set_and_verify(app: MeshApp) -> bytes:
    """`contrast set` then (all replicas Ready) `contrast verify` through the port-forwarder;
    the mesh CA verify saved."""
    with deploy.port_forward(
        app.cluster, app.namespace, f"pod/{deploy.FORWARDER_NAME}", deploy.USER_API_PORT
    ) as port:
        address = f"127.0.0.1:{port}"
        app.cli("set", "-c", address, "--workspace-dir", str(app.workspace), str(app.resources))
        deploy.wait_ready(app.cluster, app.namespace, COORDINATOR_SELECTOR, 3, READY_TIMEOUT)
        app.cli("verify", "-c", address, "--workspace-dir", str(app.workspace))
    verify = app.workspace / "verify"
    manifest = (app.workspace / "manifest.json").read_bytes()
    assert sorted(verify.glob("manifest.*.json"))[-1].read_bytes() == manifest
    return (verify / "mesh-ca.pem").read_bytes()


def _current_pod(app: MeshApp, service: str, not_in: tuple[str, ...] = ()) -> str:
    """The one Ready pod of `service`, once no other is left and it is not in `not_in` (a
    rollout's old pods gone)."""
    selector = f"app.kubernetes.io/name={service}"
    try:
        (pod,) = flow.kube(app.cluster).wait_ready(
            app.namespace, selector, 1, READY_TIMEOUT, not_in=not_in
        )
    except KubeError as error:
        pytest.fail(f"{error}\n{deploy.describe(app.cluster, app.namespace)}")
    return pod


def _leaf_of(app: MeshApp, pod: str) -> x509.Certificate:
    chain = flow.kube(app.cluster).pod_file(app.namespace, pod, CERT_CHAIN)
    return x509.load_pem_x509_certificates(chain)[0]


def _names(certificate: x509.Certificate) -> list[str]:
    extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return extension.value.get_values_for_type(x509.DNSName)


def _issued_by(certificate: x509.Certificate, mesh_ca: bytes) -> bool:
    try:
        certificate.verify_directly_issued_by(x509.load_pem_x509_certificate(mesh_ca))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _db_key_fingerprint(workspace: Path) -> str:
    """What db must show: the fingerprint of its notes key, derived here from the seed that
    `set` encrypted to the seed share owner (threshold 1) and the workload secret ID."""
    document = SeedShareDocument.from_json((workspace / "seed-shares.json").read_bytes())
    seed = document.decrypt(load_seedshare_owner_key(workspace / "seedshare-owner.pem"))
    secret = SeedEngine(seed, document.salt).workload_secret(DB_SECRET_ID)
    key = hmac.new(secret, KEY_LABEL, hashlib.sha256).digest()
    return hashlib.sha256(key).hexdigest()[:16]


def test_mesh_app_set_verify_mutual_tls_and_update(mesh_app: MeshApp) -> None:
    app = mesh_app
    cluster, namespace = app.cluster, app.namespace
    started = time.monotonic()
    timings: list[str] = []

    def mark(what: str) -> None:
        timings.append(f"{what}: {time.monotonic() - started:.1f} s")
        print(timings[-1])

    # Every confidential pod runs under the RuntimeClass generate resolved, whose handler is the
    # emulated runtime install-runtime just added to the cluster's containerd (no stand-in).
    classes = json.loads(cluster.kubectl("get", "runtimeclass", "-o", "json").stdout)["items"]
    handlers = {c["metadata"]["name"]: c["handler"] for c in classes}
    containerd_config = (cluster.directory / "containerd/config.toml").read_text()
    for kind, name in [("deployment", s) for s in SERVICES] + [("statefulset", "coordinator")]:
        spec = json.loads(cluster.kubectl("-n", namespace, "get", kind, name, "-o", "json").stdout)[
            "spec"
        ]["template"]["spec"]
        handler = handlers[spec["runtimeClassName"]]
        assert handler == app.handler, (name, handler)
        assert f"runtimes.{handler}]" in containerd_config or f'runtimes."{handler}"]' in (
            containerd_config
        ), f"{handler} is not a runtime of the cluster's containerd"

    deploy.wait_started(cluster, namespace, COORDINATOR_SELECTOR, 3, READY_TIMEOUT)
    mark("3 Coordinator replicas started")
    forwarder = deploy.forwarder_pod(namespace, app.coordinator_image)
    (app_forwarder,) = deploy.documents_of((flow.EXAMPLE / "port-forwarder.yml").read_text())
    app_forwarder["spec"]["containers"][0]["image"] = app.app_image
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=deploy.dump([forwarder]))
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=deploy.dump([app_forwarder]))
    deploy.wait_ready(cluster, namespace, f"app.kubernetes.io/name={deploy.FORWARDER_NAME}", 1, 120)

    mesh_ca = _set_and_verify(app)
    mark("contrast set and verify")

    # Each Initializer got its certificate: issued by the mesh CA verify saved, with its name.
    pods = {service: _current_pod(app, service) for service in SERVICES}
    mark("web, api and db Ready")
    for service, pod in pods.items():
        leaf = _leaf_of(app, pod)
        assert _issued_by(leaf, mesh_ca), f"{pod}: not issued by the verified mesh CA"
        assert service in _names(leaf), _names(leaf)
    fingerprint = _db_key_fingerprint(app.workspace)
    web_identity = ClientIdentity(  # web's own, read as the node sees the pod
        flow.kube(cluster).pod_file(namespace, pods["web"], CERT_CHAIN),
        flow.kube(cluster).pod_file(namespace, pods["web"], KEY),
    )
    forged = ClientIdentity.forged(x509.load_pem_x509_certificate(mesh_ca), ("web", "*"))

    deploy.wait_ready(cluster, namespace, f"app.kubernetes.io/name={APP_FORWARDER}", 1, 120)
    kube = flow.kube(cluster)

    def to(service: str, probe: Callable[[int], ProbeResult], settled: Settled) -> ProbeResult:
        """`probe` of `service` through the app's port-forwarder, on a port-forward of its own,
        again until `settled` (a connection dropped on the way is not the server's answer)."""
        return kube.probe(namespace, FORWARDER_TARGET, PORTS[service], probe, settled=settled)

    def through_web() -> dict[str, object] | None:
        result = to("web", lambda p: tls_probe(p, server_name="web", mesh_ca=mesh_ca), _answered)
        if result.refused:
            return None
        document = result.json()
        hops = (document.get("api"), document.get("db"))
        if any(not isinstance(h, dict) or "error" in h for h in hops):
            return None
        assert result.server_leaf is not None
        assert _issued_by(result.server_leaf, mesh_ca)
        assert "web" in _names(result.server_leaf)
        return document

    answer = _until("web reaches api and db", through_web, READY_TIMEOUT, app)
    print(f"GET / through web: {answer}")
    assert answer["api"] == {"service": "api", "version": "v1"}
    assert answer["db"] == {"service": "db", "key_fingerprint": fingerprint}
    # A POST retried after a dropped answer may store the note twice: the ids are not asserted.
    stored = to("web", lambda p: tls_probe(p, server_name="web", mesh_ca=mesh_ca, path="/notes",
                                            body=b"first note"), _answered).json()  # fmt: skip
    assert isinstance(stored["api"], dict)
    assert isinstance(stored["api"]["db"], dict)
    assert isinstance(stored["api"]["db"]["stored"], int), stored
    notes = to("web", lambda p: tls_probe(p, server_name="web", mesh_ca=mesh_ca, path="/notes"),
               _answered).json()  # fmt: skip
    assert isinstance(notes["api"], dict)
    assert isinstance(notes["api"]["db"], dict)
    listed = notes["api"]["db"]["notes"]
    assert listed, notes
    assert all(n["text"] == "first note" and n["authentic"] is True for n in listed), notes
    mark("web -> api -> db over mutual TLS")

    for service in ("api", "db"):
        plain = to(service, plain_probe, _closed)
        assert plain.refusal == NO_HTTP_ANSWER, f"{service} to plain HTTP: {plain}"
        anonymous = to(service, lambda p, s=service: tls_probe(p, server_name=s, mesh_ca=mesh_ca),
                       _alerted)  # fmt: skip
        assert "CERTIFICATE_REQUIRED" in anonymous.refusal, anonymous
        # The server showed its mesh identity before refusing the client.
        assert anonymous.server_leaf is not None
        assert _issued_by(anonymous.server_leaf, mesh_ca)
        assert service in _names(anonymous.server_leaf)
        impostor = to(service, lambda p, s=service: tls_probe(
            p, server_name=s, mesh_ca=mesh_ca, client=forged), _alerted)  # fmt: skip
        assert impostor.by_alert, f"{service} to a forged certificate: {impostor}"
        member = to(service, lambda p, s=service: tls_probe(
            p, server_name=s, mesh_ca=mesh_ca, client=web_identity), _answered)  # fmt: skip
        assert not member.refused, f"{service} refused web's own certificate: {member.refusal}"
        assert member.json()["service"] == service
        print(f"{service}: plain {plain.refusal!r}; no certificate {anonymous.refusal!r};"
              f" forged {impostor.refusal!r}; web's certificate answered")  # fmt: skip
    mark("outsiders refused by api and db")

    # The update: api changed, generate and set again.
    api_yml = app.resources / "api.yml"
    text = api_yml.read_text()
    assert text.count("value: v1") == 1
    api_yml.write_text(text.replace("value: v1", "value: v2"))
    app.cli(
        "generate", "--workspace-dir", str(app.workspace), "--reference-values", PLATFORM,
        "--emulated-tee", str(app.workspace.parent / "node-roots"),
        "--image-replacements", str(app.workspace.parent / "image-replacements.txt"),
        "--insecure-registry", cluster.registry, str(app.resources),
    )  # fmt: skip
    new_mesh_ca = _set_and_verify(app)
    assert new_mesh_ca != mesh_ca
    assert len(list((app.workspace / "verify").glob("manifest.*.json"))) == 2
    mark("generate, set and verify of the update")
    cluster.kubectl("-n", namespace, "apply", "-f", str(app.resources))
    new_api = _current_pod(app, "api", not_in=(pods["api"],))
    assert _issued_by(_leaf_of(app, new_api), new_mesh_ca)
    assert not _issued_by(_leaf_of(app, new_api), mesh_ca)
    mark("api rolled by its change")

    # web still holds a certificate of the old mesh CA and trusts only that CA: the new api and
    # it refuse each other (a mesh CA pins one manifest; pods are restarted to rejoin).
    stale = to("web", lambda p: tls_probe(p, server_name="web", mesh_ca=mesh_ca), _answered)
    stale_api = stale.json()["api"]
    assert isinstance(stale_api, dict)
    assert "error" in stale_api, stale
    old_web = to("api", lambda p: tls_probe(p, server_name="api", mesh_ca=new_mesh_ca,
                                            client=web_identity), _alerted)  # fmt: skip
    assert "UNKNOWN_CA" in old_web.refusal, f"the new api to the old mesh CA: {old_web}"
    print(f"old web -> new api: {stale_api}; old certificate: {old_web.refusal!r}")

    cluster.kubectl("-n", namespace, "rollout", "restart", "deployment/web", "deployment/db")
    new_pods = {
        "web": _current_pod(app, "web", not_in=(pods["web"],)),
        "api": new_api,
        "db": _current_pod(app, "db", not_in=(pods["db"],)),
    }
    mark("web and db rolled (kubectl rollout restart)")
    for service, pod in new_pods.items():
        leaf = _leaf_of(app, pod)
        assert _issued_by(leaf, new_mesh_ca), f"{pod}: not issued by the new mesh CA"
        assert not _issued_by(leaf, mesh_ca)
        assert service in _names(leaf)

    def updated() -> dict[str, object] | None:
        result = to("web", lambda p: tls_probe(p, server_name="web", mesh_ca=new_mesh_ca),
                    _answered)  # fmt: skip
        if result.refused:
            return None
        document = result.json()
        return document if document.get("api") == {"service": "api", "version": "v2"} else None

    answer = _until("web reaches the updated api", updated, READY_TIMEOUT, app)
    print(f"GET / through the new web: {answer}")
    # Same seed, same workload secret ID: db's secret (and so its notes key) is unchanged.
    assert answer["db"] == {"service": "db", "key_fingerprint": fingerprint}
    # The old mesh CA does not vouch for the new web: the client refuses the server.
    old_ca = to("web", lambda p: tls_probe(p, server_name="web", mesh_ca=mesh_ca),
                lambda r: "CERTIFICATE_VERIFY_FAILED" in r.refusal)  # fmt: skip
    assert "CERTIFICATE_VERIFY_FAILED" in old_ca.refusal, old_ca
    for service in ("api", "db"):
        old = to(service, lambda p, s=service: tls_probe(
            p, server_name=s, mesh_ca=new_mesh_ca, client=web_identity), _alerted)  # fmt: skip
        assert "UNKNOWN_CA" in old.refusal, f"the new {service} to web's old certificate: {old}"
    mark("after the update: web -> api v2 -> db, old certificates refused")
    print("\n".join(timings))
