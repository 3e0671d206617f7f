"""`contrast demo --kubernetes`: examples/mesh-app on a running test cluster, as a user deploys it.

The README's "On Kubernetes" flow on a cluster of `scripts/cluster.sh` whose node has the
emulated confidential runtime (`cluster.sh install-runtime`): the release images and the app's
image pushed by digest, `contrast coordinator-resources` and `contrast generate` on the example,
`kubectl apply`, `contrast set` and `contrast verify` through the port-forwarder pod, each pod's
certificate, a request crossing web, api and db over mutual TLS, outsiders refused, then an
update of api with a new mesh CA and the pods rolled onto it. Every `contrast` step runs the CLI
as a user types it (its output in `logs/`); each step prints one numbered line with its time.

It runs from a source checkout: the example (YAML, app, image build) is the checkout's
`examples/mesh-app`, and the cluster is the one `scripts/cluster.sh` starts.
"""

from __future__ import annotations

import importlib.util
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature

import contrast
from contrast.initializer.files import CERT_CHAIN, KEY
from contrast.local.kubecluster import KubeCluster, KubeError, push_image, push_release
from contrast.local.meshprobe import ClientIdentity, ProbeResult, plain_probe, tls_probe
from contrast.local.steps import DemoFailed, Steps

PLATFORM = "emulated-snp"
EXAMPLE = Path(contrast.__file__).resolve().parents[2] / "examples" / "mesh-app"
FORWARDER = Path(contrast.__file__).resolve().parents[2] / "examples/kubernetes"
SERVICES = ("web", "api", "db")
PORTS = {"web": 8080, "api": 8001, "db": 8002}
COORDINATORS = "app.kubernetes.io/name=coordinator"
APP_FORWARDER = "pod/port-forwarder-mesh-app"
TIMEOUT = 300.0


def _name(service: str) -> str:
    return f"app.kubernetes.io/name={service}"


def _issued_by(certificate: x509.Certificate, mesh_ca: bytes) -> bool:
    try:
        certificate.verify_directly_issued_by(x509.load_pem_x509_certificate(mesh_ca))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@dataclass
class KubeDemo:
    cluster: KubeCluster
    workdir: Path
    images: Path
    say: Callable[[str], None] = print
    keep: bool = False
    steps: Steps = field(init=False)

    def __post_init__(self) -> None:
        self.steps = Steps(self.say)
        self.namespace = f"contrast-demo-{secrets.token_hex(3)}"
        self.resources = self.workdir / "resources"
        self.logs = self.workdir / "logs"
        self.pushed: dict[str, str] = {}  # image reference: pushed by digest

    # Commands, as a user types them ----------------------------------------------------------

    def contrast(self, *arguments: str) -> str:
        """`contrast ARGUMENTS` in the work directory (the workspace); its stdout."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"contrast-{arguments[0]}.log"
        result = subprocess.run(  # noqa: S603 - this interpreter's contrast
            [sys.executable, "-m", "contrast", *arguments],
            cwd=self.workdir, capture_output=True, timeout=TIMEOUT, check=False,
        )  # fmt: skip
        with log.open("ab") as out:
            out.write(b"$ contrast " + " ".join(arguments).encode() + b"\n")
            out.write(result.stdout + result.stderr)
        if result.returncode:
            said = result.stderr.decode(errors="replace").strip().splitlines()
            raise DemoFailed(f"contrast {arguments[0]}: {said[-1] if said else 'failed'}")
        return result.stdout.decode()

    def kubectl(self, *arguments: str, input: bytes | None = None) -> str:
        return self.cluster.kubectl("-n", self.namespace, *arguments, input=input).stdout.decode()

    # The flow --------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        finally:
            if not self.keep:
                self.cluster.kubectl(
                    "delete", "namespace", self.namespace, "--wait=false", check=False
                )

    def _run(self) -> None:
        step = self.steps.step
        with step("the cluster and its emulated confidential runtime") as details:
            details.append(self._check_cluster())
        with step("release images and the app's image pushed by digest") as details:
            replacements = self._push()
            details.append(f"{self.cluster.registry}, {replacements.name}")
        with step("the node's emulated roots, public part") as details:
            roots = self.workdir / "node-roots"
            export_node_roots(roots)
            details.append(f"{roots.name}/, as a user takes AMD's or Intel's")
        generate = (
            "generate", "--reference-values", PLATFORM, "--emulated-tee", str(roots),
            "--image-replacements", str(replacements), "--insecure-registry",
            self.cluster.registry, "resources/",
        )  # fmt: skip
        with step("contrast coordinator-resources; contrast generate resources/") as details:
            self._resources(replacements)
            self.contrast(*generate)
            details.append("Initializers and sidecars injected, a policy on each pod")
        with step(f"kubectl apply -f resources/ (namespace {self.namespace})") as details:
            self.cluster.kubectl("create", "namespace", self.namespace)
            self.kubectl("apply", "-f", str(self.resources))
            self._forwarders(replacements)
            self.cluster.wait_started(self.namespace, COORDINATORS, 3, TIMEOUT)
            details.append("3 Coordinator replicas started under the emulated runtime")
        with step("contrast set and verify through port-forwarder-coordinator") as details:
            mesh_ca = self._set_and_verify()
            details.append("the other replicas got the seed by peer recovery; verify/ written")
        with step("web, api and db Ready, each with its mesh certificate") as details:
            pods = {s: self._one_ready(s) for s in SERVICES}
            details.append(self._certificates(pods, mesh_ca))
        with step("https://web:8080/ → api and db over mutual TLS") as details:
            answer = self._until(lambda: self._through_web(mesh_ca))
            db_before = answer["db"]
            details.append(f"api {answer['api']}, db {answer['db']}")
            details.append("TLS checked against verify/mesh-ca.pem and the name web")
        with step("api and db refuse outsiders") as details:
            web = ClientIdentity(
                self.cluster.pod_file(self.namespace, pods["web"], CERT_CHAIN),
                self.cluster.pod_file(self.namespace, pods["web"], KEY),
            )
            details.append(self._outsiders(mesh_ca, web))
        with step("update: api's VERSION v1 → v2; generate, set and verify again") as details:
            api = self.resources / "api.yml"
            api.write_text(api.read_text().replace("value: v1", "value: v2"))
            self.contrast(*generate)
            new_mesh_ca = self._set_and_verify()
            if new_mesh_ca == mesh_ca:
                raise DemoFailed("the update kept the mesh CA")
            details.append("a new mesh CA: it pins the new manifest")
        with step("kubectl apply: api rolled; web, on the old mesh CA, cannot reach it") as details:
            self.kubectl("apply", "-f", str(self.resources))
            self._one_ready("api", not_in=pods["api"])
            stale = self._to("web", lambda p: tls_probe(p, server_name="web", mesh_ca=mesh_ca))
            stale_api = stale.json().get("api") if not stale.refused else None
            if not isinstance(stale_api, dict) or "error" not in stale_api:
                raise DemoFailed(f"web, on the old mesh CA, reached the new api: {stale}")
            details.append(f"web → api: {stale_api}")
        with step("kubectl rollout restart web db: all on the new mesh CA") as details:
            self.kubectl("rollout", "restart", "deployment/web", "deployment/db")
            new = {s: self._one_ready(s, not_in=pods[s]) for s in SERVICES}
            details.append(self._certificates(new, new_mesh_ca))
            answer = self._until(lambda: self._through_web(new_mesh_ca, version="v2"))
            if answer["db"] != db_before:
                raise DemoFailed(f"db's workload secret changed: {answer['db']}")
            details.append(f"api {answer['api']}, db's workload secret unchanged")
            old = self._to(
                "api",
                lambda p: tls_probe(p, server_name="api", mesh_ca=new_mesh_ca, client=web),
                lambda r: r.by_alert,
            )
            if "UNKNOWN_CA" not in old.refusal:
                raise DemoFailed(f"the new api to web's old certificate: {old}")
            details.append("web's old certificate refused (unknown CA)")

    # Steps' parts ----------------------------------------------------------------------------

    def _check_cluster(self) -> str:
        self.cluster.check()
        if not (EXAMPLE / "web.yml").is_file():
            raise KubeError(
                f"no example at {EXAMPLE}", hint="run the Kubernetes demo from a source checkout"
            )
        # The RuntimeClass of this release's emulated runtime, which generate names on the pods.
        printed = self.contrast("runtime", "--platform", PLATFORM)
        name = re.search(rf"^  name: (contrast-cc-{PLATFORM}-[0-9a-f]+)$", printed, re.MULTILINE)
        handler = self.cluster.kubectl(
            "get", "runtimeclass", name.group(1) if name else "-", "-o", "jsonpath={.handler}",
            check=False,
        ).stdout.decode()  # fmt: skip
        if not name or not handler:
            raise KubeError(
                f"the cluster has no RuntimeClass of this release's {PLATFORM} runtime",
                hint=f"bash scripts/cluster.sh install-runtime {self.cluster.directory}"
                f" {PLATFORM} {sys.executable}",
            )
        return f"{self.cluster.directory}, RuntimeClass {name.group(1)}, handler {handler}"

    def _push(self) -> Path:
        scratch = self.workdir / "pushed"
        scratch.mkdir(parents=True, exist_ok=True)
        pushed = push_release(self.images, self.cluster.registry, scratch)
        reference, pushed[reference] = push_app_image(self.images, self.cluster.registry, scratch)
        self.pushed = pushed
        replacements = self.workdir / "replacements.txt"
        replacements.write_text("".join(f"{k}={v}\n" for k, v in sorted(pushed.items())))
        return replacements

    def _resources(self, replacements: Path) -> None:
        self.resources.mkdir(parents=True, exist_ok=True)
        for name in ("web.yml", "api.yml", "db.yml"):
            shutil.copy(EXAMPLE / name, self.resources / name)
        coordinator = self.contrast(
            "coordinator-resources", "--platform", PLATFORM, "--namespace", self.namespace,
            "--image-replacements", str(replacements),
        )  # fmt: skip
        (self.resources / "coordinator.yml").write_text(coordinator)

    def _forwarders(self, replacements: Path) -> None:
        """The two plain port-forwarder pods, their images replaced as a user replaces them."""
        for path in (FORWARDER / "port-forwarder-coordinator.yml", EXAMPLE / "port-forwarder.yml"):
            text = path.read_text()
            for image, pushed in self.pushed.items():
                text = text.replace(f"image: {image}\n", f"image: {pushed}\n")
            self.kubectl("apply", "-f", "-", input=text.encode())
        for name in ("port-forwarder-coordinator", "port-forwarder-mesh-app"):
            self.cluster.wait_ready(self.namespace, _name(name), 1, TIMEOUT)

    def _set_and_verify(self) -> bytes:
        with self.cluster.port_forward(
            self.namespace, "pod/port-forwarder-coordinator", (1313,)
        ) as ports:
            coordinator = f"127.0.0.1:{ports[1313]}"
            self.contrast("set", "-c", coordinator, "resources/")
            self.cluster.wait_ready(self.namespace, COORDINATORS, 3, TIMEOUT)
            self.contrast("verify", "-c", coordinator)
        return (self.workdir / "verify" / "mesh-ca.pem").read_bytes()

    def _certificates(self, pods: dict[str, str], mesh_ca: bytes) -> str:
        names = []
        for pod in pods.values():
            chain = self.cluster.pod_file(self.namespace, pod, CERT_CHAIN)
            leaf = x509.load_pem_x509_certificates(chain)[0]
            if not _issued_by(leaf, mesh_ca):
                raise DemoFailed(f"{pod}'s certificate is not of the verified mesh CA")
            names.append(leaf.subject.rfc4514_string())
        return f"{', '.join(names)} issued by verify/mesh-ca.pem"

    def _one_ready(self, service: str, not_in: str = "") -> str:
        """The one Ready pod of `service` once no other is left (and not `not_in`)."""
        return self.cluster.wait_ready(
            self.namespace, _name(service), 1, TIMEOUT, not_in=(not_in,)
        )[0]

    def _to(
        self,
        service: str,
        probe: Callable[[int], ProbeResult],
        settled: Callable[[ProbeResult], bool] = lambda result: not result.refused,
    ) -> ProbeResult:
        """`probe` of `service` through the app's port-forwarder (a port-forward of its own),
        again until `settled`: a connection dropped on the way is not the server's answer."""
        return self.cluster.probe(
            self.namespace, APP_FORWARDER, PORTS[service], probe, settled=settled
        )

    def _through_web(self, mesh_ca: bytes, version: str = "v1") -> dict[str, Any] | None:
        result = self._to("web", lambda p: tls_probe(p, server_name="web", mesh_ca=mesh_ca))
        if result.refused:
            return None
        answer = result.json()
        api, db = answer.get("api"), answer.get("db")
        if not isinstance(api, dict) or not isinstance(db, dict):
            return None
        return answer if api.get("version") == version and "error" not in db else None

    def _outsiders(self, mesh_ca: bytes, web: ClientIdentity) -> str:
        """api and db refuse plain HTTP (no answer), no client certificate and a forged one
        (each by the server's own TLS alert), and answer web's certificate."""
        forged = ClientIdentity.forged(x509.load_pem_x509_certificate(mesh_ca), ("web", "*"))
        for service in ("api", "db"):

            def tls(
                client: ClientIdentity | None, s: str = service
            ) -> Callable[[int], ProbeResult]:
                return lambda p: tls_probe(p, server_name=s, mesh_ca=mesh_ca, client=client)

            plain = self._to(service, plain_probe, lambda r: r.refusal.startswith("no HTTP"))
            if not plain.refusal.startswith("no HTTP answer"):
                raise DemoFailed(f"{service} to plain HTTP: {plain}")
            for what, client in (("no certificate", None), ("a forged one", forged)):
                result = self._to(service, tls(client), lambda r: r.by_alert)
                if not result.by_alert:
                    raise DemoFailed(f"{service} to {what}: {result}")
            member = self._to(service, tls(web))
            if member.refused:
                raise DemoFailed(f"{service} refused web's own certificate: {member.refusal}")
        return "api and db: plain TCP, no certificate and a forged one refused; web's answered"

    def _until(self, attempt: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT
        while (answer := attempt()) is None:
            if time.monotonic() > deadline:
                raise DemoFailed(f"no answer through web within {TIMEOUT:.0f} s")
            time.sleep(2)
        return answer


def load_example_builder() -> Any:
    """examples/mesh-app/build_image.py (a script of the example, not a module of contrast)."""
    spec = importlib.util.spec_from_file_location(
        "mesh_app_build_image", EXAMPLE / "build_image.py"
    )
    if spec is None or spec.loader is None:
        raise KubeError(f"cannot load {EXAMPLE / 'build_image.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def push_app_image(release_layout: Path, registry: str, scratch: Path) -> tuple[str, str]:
    """Builds the example's image as `examples/mesh-app/build_image.py` does (the release base
    layer of `release_layout` plus the app's layer) into `scratch` and pushes it to `registry`
    by digest; (the example's image reference, the pushed digest reference)."""
    builder = load_example_builder()
    layout = scratch / "mesh-app-image"
    builder.build(release_layout, layout)
    reference = str(builder.REFERENCE)
    return reference, push_image(layout, reference, f"{registry}/mesh-app:1.0", scratch)


def export_node_roots(directory: Path) -> None:
    """The node's emulated roots of trust, public part only (`contrast-emulated-runtime setup
    --public`), which a user gives `generate --emulated-tee` as they would give AMD's or Intel's
    roots. The test cluster's one node is this machine, so its roots are this machine's."""
    result = subprocess.run(  # noqa: S603 - this interpreter's contrast
        [sys.executable, "-m", "contrast.emulatedruntime", "setup", "--public", str(directory)],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    if result.returncode:
        raise DemoFailed(f"the node's roots: {result.stderr.decode(errors='replace')[-300:]}")


def run_kubernetes_demo(
    cluster: Path,
    workdir: Path,
    images: Path,
    *,
    say: Callable[[str], None] = print,
    keep: bool = False,
) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    KubeDemo(KubeCluster(cluster), workdir, images, say, keep).run()
    say(f"done in {time.monotonic() - started:.1f} s; look around in {workdir}")
