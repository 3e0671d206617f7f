"""`contrast demo`: the whole Contrast flow as local processes on an emulated TEE (SNP or TDX).

Coordinator replicas, Initializers and workloads are separate processes talking over loopback
exactly as they would in a cluster; only the TEE is emulated. Three Coordinator replicas share one
history directory and list each other as peers: the two that did not get the manifest, and one
killed with SIGKILL, become ready by peer recovery; only when all three are gone does it take
`contrast recover`. Each step prints one line; any failure stops the demo with a non-zero exit.
What a user wants to look at stays in the work directory.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from contrast.atls.issuers import TeeKind
from contrast.client import operations
from contrast.client.workspace import MANIFEST, SEED_SHARES, Workspace
from contrast.initializer.files import CERT_CHAIN, MESH_CA
from contrast.local.processes import Processes, Running, free_port, wait_for_port
from contrast.local.runners import ContainerRunner, ProcessRunner, Runner
from contrast.local.steps import DemoFailed, Steps
from contrast.local.workspace import (
    RESOURCES,
    SEEDSHARE_OWNERS,
    SEEDSHARE_THRESHOLD,
    DemoWorkload,
    emulated_reference_values,
    write_workspace,
)
from contrast.servicemesh.sidecar import EGRESS_ENV

COORDINATOR = DemoWorkload("coordinator", role="coordinator")
SERVER = DemoWorkload("web")
CLIENT = DemoWorkload("client")
LATE = DemoWorkload("late")
ROGUE = DemoWorkload("rogue")  # not in the manifest
EGRESS_ADDRESS = "127.0.0.2"  # the client app dials its sidecar here, as in a pod
STARTUP_TIMEOUT = 30.0
REPLICAS = 3
# How often a replica in recovery mode asks its peers: the Coordinator's default is 15 s (as the
# original's); the demo asks often, so a rejoin takes about a second.
PEER_INTERVAL = 0.25


@dataclass(frozen=True)
class ReplicaPorts:
    user: int
    mesh: int
    http: int


@dataclass
class Demo:
    workdir: Path
    say: Callable[[str], None] = print
    tee: TeeKind = TeeKind.EMULATED_SNP
    images: Path | None = None
    processes: Processes = field(init=False)
    components: Runner = field(init=False)
    coordinators: dict[int, Running] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state = self.workdir / ".state"
        self.processes = Processes(self.workdir / "logs")
        self.steps = Steps(self.say)
        # The user's apps are always local processes; the release components run as processes
        # of this interpreter or, with `images`, as containers of the built release images.
        self.components = (
            ProcessRunner(self.processes)
            if self.images is None
            else ContainerRunner(self.images, self.workdir.resolve())
        )
        self.replicas = [
            ReplicaPorts(free_port(), free_port(), free_port()) for _ in range(REPLICAS)
        ]
        first = self.replicas[0]
        self.user_port, self.mesh_port, self.http_port = first.user, first.mesh, first.http
        self.app_port, self.web_mtls_port, self.egress_port = free_port(), free_port(), free_port()

    def step(self, description: str) -> AbstractContextManager[list[str]]:
        """One line per step: what happened (filled in by the step) and how long it took."""
        return self.steps.step(description)

    # Processes -------------------------------------------------------------------------------

    def _tee_arguments(self, workload: DemoWorkload) -> list[str]:
        return [
            "--tee", str(self.tee),
            "--tee-state", str(self.state / "tee"),
            "--policy-hash", workload.policy_hash.hex(),
        ]  # fmt: skip

    def start_coordinators(self, *indices: int) -> None:
        """Start these replicas, all on one history directory, each with the others as peers."""
        for index in indices:
            ports = self.replicas[index]
            peers = [f"--peer=127.0.0.1:{p.mesh}" for p in self.replicas if p is not ports]
            self.coordinators[index] = self.components.start(
                f"coordinator-{index}",
                "coordinator",
                [
                    "coordinator", *self._tee_arguments(COORDINATOR),
                    "--state-dir", str(self.state / "coordinator"),
                    "--listen", "127.0.0.1",
                    "--user-api-port", str(ports.user),
                    "--mesh-api-port", str(ports.mesh),
                    "--http-port", str(ports.http),
                    "--transit-port", "0",
                    *peers, "--peer-interval", str(PEER_INTERVAL),
                ],
            )  # fmt: skip
        for index in indices:
            ports = self.replicas[index]
            for port in (ports.user, ports.mesh, ports.http):
                wait_for_port(port, timeout=STARTUP_TIMEOUT, process=self.coordinators[index])

    def wait_ready(self, *indices: int) -> float:
        """Wait until these replicas say ready; how long it took."""
        started = time.monotonic()
        for index in indices:
            while (mode := self._coordinator_mode(index)) != "ready":
                if self.coordinators[index].exit_code() is not None:
                    raise DemoFailed(
                        f"Coordinator replica {index} exited",
                        hint=f"see {self.coordinators[index].log}",
                    )
                if time.monotonic() - started > STARTUP_TIMEOUT:
                    raise DemoFailed(f"Coordinator replica {index} is still in mode {mode!r}")
                time.sleep(0.05)
        return time.monotonic() - started

    def run_initializer(
        self, workload: DemoWorkload, *, replica: int = 0, output: str | None = None
    ) -> tuple[int, str]:
        return self.components.run(
            f"initializer-{output or workload.name}",
            "initializer",
            [
                "initializer", *self._tee_arguments(workload),
                "--coordinator", f"127.0.0.1:{self.replicas[replica].mesh}",
                "--output", str(self.workdir / "workloads" / (output or workload.name)),
                "--deadline", "20",
            ],
            timeout=60,
        )  # fmt: skip

    @property
    def target(self) -> operations.Target:
        return operations.Target(f"127.0.0.1:{self.user_port}", self.workdir / MANIFEST)

    # The flow --------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            if isinstance(self.components, ContainerRunner):
                with self.step("release images pushed to a loopback registry, pulled by digest"):
                    self.components.prepare(("coordinator", "initializer", "service-mesh-proxy"))
            self._run()
        finally:
            self.components.stop_all()
            self.processes.stop_all()

    def _run(self) -> None:
        """The demo's acts in order, each step one line of output."""
        workspace = Workspace(self.workdir)
        self._deploy(workspace)
        self._join_the_mesh()
        with self.step("contrast verify") as details:
            result = operations.verify(self.target, workspace)
            details.append(f"{result.directory.name}/ written, active manifest matches")
        self._restart_replicas()
        self._recover(workspace)

    def _deploy(self, workspace: Workspace) -> None:
        """The emulated TEE, the workspace, the replicas, and the manifest set through one."""
        name = "SEV-SNP" if self.tee is TeeKind.EMULATED_SNP else "TDX"
        with self.step(f"emulated {name} ready") as details:
            reference_values = emulated_reference_values(self.tee, self.state / "tee")
            details.append(f"its certificate hierarchy is in {self.state / 'tee'}")
        with self.step("workspace written") as details:
            everyone = [COORDINATOR, SERVER, CLIENT, LATE]
            _, manifest = write_workspace(
                self.workdir,
                reference_values,
                everyone,
                seedshare_owners=SEEDSHARE_OWNERS,
                seedshare_threshold=SEEDSHARE_THRESHOLD,
            )
            details.append(f"{MANIFEST} with {len(manifest.policies)} policies, owner keys")
        everyone_else = tuple(range(1, REPLICAS))
        with self.step(f"{REPLICAS} Coordinator replicas started") as details:
            self.start_coordinators(*range(REPLICAS))
            details.append(
                f"user APIs {', '.join(f'127.0.0.1:{p.user}' for p in self.replicas)};"
                " one history directory, each lists the others as peers"
            )
        with self.step("manifest set through replica 0") as details:
            operations.set_manifest(self.target, workspace, self.workdir / RESOURCES)
            details.append("Coordinator attested against the manifest; seed shares saved")
        with self.step("replicas 1 and 2 got the seed from a peer") as details:
            took = self.wait_ready(*everyone_else)
            details.append(f"ready {took:.1f} s later by peer recovery, attested both ways")

    def _join_the_mesh(self) -> None:
        """Workloads get certificates (a rogue one does not) and talk through their sidecars."""
        for index, workload in enumerate((SERVER, CLIENT)):
            with self.step(f"Initializer of {workload.name!r} got its mesh certificate") as details:
                code, last = self.run_initializer(workload, replica=index)
                if code != 0:
                    raise DemoFailed(f"the Initializer exited with {code}: {last}")
                details.append(f"from replica {index}; files in workloads/{workload.name}")
        with self.step("a workload whose policy is not in the manifest is refused") as details:
            code, last = self.run_initializer(ROGUE)
            if code == 0:
                raise DemoFailed("the rogue workload got a certificate")
            details.append(last.rpartition("PERMISSION_DENIED: ")[2])
        with self.step("Envoy sidecars started") as details:
            self._start_sidecars()
            details.append(
                f"web's ingress :{self.web_mtls_port} (mutual TLS),"
                f" client's egress {EGRESS_ADDRESS}:{self.egress_port}"
            )
        with self.step("client → its sidecar → web's sidecar → web, over mutual TLS") as details:
            details.append(self._request_through_mesh())
        with self.step("a client without a mesh certificate is refused") as details:
            details.append(self._probe_without_certificate())

    def _restart_replicas(self) -> None:
        """A killed replica rejoins by itself; all of them killed come back in recovery mode."""
        last_replica = REPLICAS - 1
        with self.step(f"replica {last_replica} killed (SIGKILL), restarted, rejoined") as details:
            self.coordinators[last_replica].kill()
            self.start_coordinators(last_replica)
            took = self.wait_ready(last_replica)
            details.append(f"ready {took:.1f} s after it listened, by peer recovery; no operator")
        with self.step(f"it issues from the same mesh CA ({SERVER.name!r} asks again)") as details:
            again = f"{SERVER.name}.via-replica-{last_replica}"
            code, last = self.run_initializer(SERVER, replica=last_replica, output=again)
            if code != 0:
                raise DemoFailed(f"the Initializer exited with {code}: {last}")
            details.append(self._same_mesh_ca(again))
        with self.step(f"all {REPLICAS} replicas killed (SIGKILL) and restarted") as details:
            for process in self.coordinators.values():
                process.kill()
            self.start_coordinators(*range(REPLICAS))
            modes = {self._coordinator_mode(index) for index in range(REPLICAS)}
            if modes != {"recovery"}:
                raise DemoFailed(f"the restarted replicas are in modes {sorted(modes)}")
            details.append("no peer is ready: each comes back in recovery mode")

    def _recover(self, workspace: Workspace) -> None:
        """Seed share owners recover the Coordinator, and a new workload joins afterwards."""
        owners = (SEEDSHARE_OWNERS[0], SEEDSHARE_OWNERS[2])
        with self.step(
            f"contrast recover (replica 0) with {len(owners)} of {len(SEEDSHARE_OWNERS)} seed"
            " share owners, the others from it"
        ) as details:
            operations.recover(
                self.target,
                workspace,
                seedshare_owner_key=[workspace.path(owner) for owner in owners],
                seed_shares=workspace.path(SEED_SHARES),
            )
            took = self.wait_ready(*range(REPLICAS))
            details.append(
                f"shares of {' and '.join(owners)} combined, history checked;"
                f" all ready {took:.1f} s later"
            )
        with self.step(f"a new workload {LATE.name!r} joins after the recovery") as details:
            code, last = self.run_initializer(LATE, replica=REPLICAS - 1)
            if code != 0:
                raise DemoFailed(f"the Initializer exited with {code}: {last}")
            details.append(self._chains_to_verified_root(LATE))

    def _coordinator_mode(self, index: int = 0) -> str:
        """What the readiness probe says (it answers 503 with the mode until ready)."""
        url = f"http://127.0.0.1:{self.replicas[index].http}/probe/readiness"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode().strip())
        except urllib.error.HTTPError as error:
            return str(error.read().decode().strip())

    def _app(self, *arguments: str) -> list[str]:
        return ["-m", "contrast.local.app", *arguments]

    def _start_sidecars(self) -> None:
        envoy = self.components.envoy
        server = self.processes.start(
            "app-web", self._app("serve", "--port", str(self.app_port), "--name", SERVER.name)
        )
        wait_for_port(self.app_port, timeout=STARTUP_TIMEOUT, process=server)
        sidecars: tuple[tuple[DemoWorkload, int, int, int, dict[str, str]], ...] = (
            (SERVER, self.app_port, self.web_mtls_port, free_port(), {}),
            (CLIENT, free_port(), free_port(), free_port(), {EGRESS_ENV: self._egress()}),
        )
        for workload, upstream, mtls_port, tls_port, env in sidecars:
            files = self.workdir / "workloads" / workload.name
            sidecar = self.components.start(
                f"sidecar-{workload.name}",
                "service-mesh-proxy",
                [
                    "servicemesh", "run", "--envoy", envoy,
                    "--tls-dir", str(files / "tls-config"),
                    "--config-path", str(files / "envoy-config.json"),
                    "--local-upstream", str(upstream),
                    "--mtls-port", str(mtls_port), "--tls-port", str(tls_port),
                ],
                env={**env, "CONTRAST_LOG_FORMAT": "text"},
            )  # fmt: skip
            wait_for_port(mtls_port, timeout=STARTUP_TIMEOUT, process=sidecar)
        wait_for_port(self.egress_port, timeout=STARTUP_TIMEOUT, host=EGRESS_ADDRESS)

    def _egress(self) -> str:
        return f"{SERVER.name}#{EGRESS_ADDRESS}:{self.egress_port}#127.0.0.1:{self.web_mtls_port}"

    def _request_through_mesh(self) -> str:
        result = self.processes.run(
            "app-client",
            self._app("request", "--address", EGRESS_ADDRESS, "--port", str(self.egress_port)),
            timeout=30,
        )
        if result.returncode != 0:
            raise DemoFailed(f"the request failed: {result.stderr.strip()}")
        return result.stdout.strip()

    def _probe_without_certificate(self) -> str:
        mesh_ca = self.workdir / "workloads" / CLIENT.name / "tls-config" / "mesh-ca.pem"
        result = self.processes.run(
            "app-outsider",
            self._app(
                "probe-without-certificate", "--mesh-ca", str(mesh_ca),
                "--port", str(self.web_mtls_port), "--server-name", SERVER.name,
            ),
            timeout=30,
        )  # fmt: skip
        answer = result.stdout.strip()
        if not answer.startswith("refused"):
            raise DemoFailed(f"web's sidecar let a client without certificate in: {answer}")
        return answer

    def _same_mesh_ca(self, output: str) -> str:
        """The mesh CA of a certificate got now is the one `verify` saved before the kill."""
        verified = (self.workdir / "verify" / "mesh-ca.pem").read_bytes()
        got = (self.workdir / "workloads" / output / MESH_CA).read_bytes()
        if got != verified:
            raise DemoFailed("the rejoined replica issues from another mesh CA")
        return f"workloads/{output}/{MESH_CA} is the mesh CA verify saved"

    def _chains_to_verified_root(self, workload: DemoWorkload) -> str:
        """The new certificate chains to the root CA that `verify` saved before the restart."""
        root = x509.load_pem_x509_certificate(
            (self.workdir / "verify" / "coordinator-root-ca.pem").read_bytes()
        )
        chain = x509.load_pem_x509_certificates(
            (self.workdir / "workloads" / workload.name / CERT_CHAIN).read_bytes()
        )
        verifier = (
            PolicyBuilder().store(Store([root])).time(datetime.now(UTC)).build_client_verifier()
        )
        try:
            verifier.verify(chain[0], chain[1:])
        except VerificationError as error:
            message = f"its certificate does not chain to the verified root: {error}"
            raise DemoFailed(message) from None
        return "its certificate chains to the root CA saved by verify before the restart"


def run_demo(
    workdir: Path,
    *,
    tee: TeeKind = TeeKind.EMULATED_SNP,
    say: Callable[[str], None] = print,
    images: Path | None = None,
) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    Demo(workdir, say, tee, images).run()
    say(f"done in {time.monotonic() - started:.1f} s; look around in {workdir}")
