"""A flat history (issue 29): `set`, `verify`, GetManifests and a restart at update 1 against U.

On each history backend, files and ConfigMaps on the test cluster's real API server, a real
Coordinator serves its user API on loopback (gRPC, TLS, the emulated SNP TEE) and the CLI's
commands run in this process as `contrast set`, `verify` and `recover` run (`contrast.cli.main`,
without the interpreter's start, which does not depend on the history):
- `set`: one update, signed by the workspace's owner key (the manifest alternates between two
  SANs of one workload, so each is a new manifest);
- `verify`: right after that `set`, so it fetches the one manifest `verify/` lacks;
- GetManifests from the head the client saw, through the gRPC client (what all three send),
  the best of 10 calls;
- a restart: a new Coordinator on the same store, started, and `contrast recover` (the Recover
  call and the GetManifests after it) until it returns. The seed share owner's RSA key is loaded
  once: its consistency check (about 1 s here) does not depend on the history and would hide it.
Two deployments, each with its own Coordinator, workspace and store, take turns round by round:
one at update 1 and one driven in process (untimed) to update U, its workspace verifying every
100 updates as a user's would. The floor, timed in the same turns, is what every one of these
commands does whatever the history holds: attesting the Coordinator (fetch its certificate,
Attest, verify the evidence). Printed: the medians and their ratio U/1, and the best of the
rounds (least disturbed by other load) and theirs. Goal: within 10 %.

Run: `.venv/bin/python bench/bench_history_flat.py [UPDATES] [ROUNDS] [files|configmaps ...]`,
with CONTRAST_TEST_CLUSTER=DIR naming a running cluster for the ConfigMaps (without it, one is
brought up in a temporary folder and taken down after: root, minutes if not built yet).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench's cluster helper

from bench_history_api import cluster
from contrast.atls.client import connect_attested
from contrast.atls.identity import TlsIdentity
from contrast.atls.issuers import EmulatedSnpIssuer, TeeKind
from contrast.atls.reportdata import public_key_der
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.cli.main import main as contrast
from contrast.client import operations
from contrast.client.resources import collect_policies
from contrast.client.transitions import last_seen
from contrast.client.workspace import WORKLOAD_OWNER_KEY, Workspace, load_workload_owner_key
from contrast.coordinator.core import Coordinator, utc_now
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.history.configmaps import ConfigMapStore, core_api
from contrast.history.history import History
from contrast.history.store import FileSystemStore, Store
from contrast.local.workspace import DemoWorkload, emulated_reference_values, write_workspace
from contrast.manifest.ownership import sign_update
from contrast.manifest.verifier import coordinator_verifier, workload_verifier

COORDINATOR = DemoWorkload("coordinator", role="coordinator")
WEB = DemoWorkload("web")
GOAL = 1.10
FLOOR = "floor: attest the Coordinator"
# While the old deployment is driven, its workspace verifies every so many updates: one verify
# of all 1000 at the end would be the catch-up of a workspace that missed them (its own cost,
# proportional to what it missed: on ConfigMaps beyond the CLI's 30 s deadline).
VERIFY_EVERY = 100
CALLS = 10
operations.load_seedshare_owner_key = functools.cache(operations.load_seedshare_owner_key)


class Deployment:
    """A workspace and its Coordinator on one store; the Coordinator restarts on that store."""

    def __init__(self, directory: Path, store: Callable[[], Store]) -> None:
        self.tee = EmulatedSnp(directory / "tee")
        self.root = directory / "workspace"
        self.workspace, self.manifest = write_workspace(
            self.root,
            emulated_reference_values(TeeKind.EMULATED_SNP, directory / "tee"),
            [COORDINATOR, WEB],
        )
        self.store = store
        self.server: CoordinatorServer | None = None
        self.variant = 0
        self.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=0)
            self.server = None

    def start(self) -> None:
        self.stop()
        coordinator = Coordinator(History(self.store()), verifier_for=workload_verifier)
        self.server = CoordinatorServer(
            coordinator,
            EmulatedSnpIssuer(self.tee, COORDINATOR.policy_hash),
            TlsIdentity.generate(now=utc_now()),
            host="127.0.0.1",
            ports=Ports(0, 0, 0),
        )
        self.server.start()

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.ports.user_api}"

    def cli(self, command: str) -> None:
        arguments = [command, "-c", self.address, "--workspace-dir", str(self.root)]
        if command == "set":
            arguments.append(str(self.root / "resources"))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = contrast(arguments)
        if code != 0:
            raise SystemExit(f"contrast {command} failed: {err.getvalue().strip()}")

    def next_manifest(self) -> bytes:
        """The workspace's manifest with web's SANs alternated: a new manifest each update."""
        path = self.root / "manifest.json"
        document = json.loads(path.read_bytes())
        self.variant += 1
        document["Policies"][WEB.policy_hash.hex()]["SANs"] = ["web", f"web{self.variant % 2}"]
        data = (json.dumps(document, indent=2) + "\n").encode()
        path.write_bytes(data)
        return data

    def drive(self, updates: int) -> None:
        """`updates` owner-signed updates straight into the Coordinator (as `set` sends them)."""
        assert self.server is not None
        coordinator = self.server.coordinator
        key = load_workload_owner_key(self.root / WORKLOAD_OWNER_KEY)
        owner = public_key_der(key.public_key())
        policies = collect_policies(self.root / "resources")
        history = History(self.store())
        for _ in range(updates):
            manifest = self.next_manifest()
            latest = history.get_latest_unverified()
            assert latest is not None
            head = latest.transition_hash
            coordinator.set_manifest(
                manifest,
                [policies[h] for h in sorted(policies)],
                previous_transition_hash=head,
                owner_public_key=owner,
                signature=sign_update(key, manifest, head),
            )

    def attest(self) -> None:
        verifier = coordinator_verifier(self.manifest, [COORDINATOR.policy_hash])
        connect_attested(self.address, verifier, now=datetime.now(UTC)).close()

    def get_manifests_since_head(self) -> None:
        from contrast.api.services import UserApiClient  # noqa: PLC0415

        seen = last_seen(Workspace(self.root)).transition_hash
        assert seen is not None
        verifier = coordinator_verifier(self.manifest, [COORDINATOR.policy_hash])
        connection = connect_attested(self.address, verifier, now=datetime.now(UTC))
        try:
            client = UserApiClient(connection.channel, timeout=30)
            self.last_call = float("inf")
            for _ in range(CALLS):  # the best of several calls: one is a few ms
                start = time.perf_counter()
                answer = client.get_manifests(since=seen)
                self.last_call = min(self.last_call, time.perf_counter() - start)
                assert len(answer.Manifests) == 1
        finally:
            connection.close()


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def measure_once(deployment: Deployment, samples: dict[str, list[float]]) -> None:
    """Each figure once, in ms, added to `samples`."""

    def add(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    def restart() -> None:
        deployment.start()
        deployment.cli("recover")

    add(FLOOR, timed(deployment.attest))
    deployment.next_manifest()
    add("contrast set (one update)", timed(lambda: deployment.cli("set")))
    add("contrast verify (after it)", timed(lambda: deployment.cli("verify")))
    deployment.get_manifests_since_head()
    add("GetManifests since the head (call)", deployment.last_call * 1000)
    deployment.stop()  # the old process gone first (its HTTP server polls every 0.5 s to stop)
    add("restart + contrast recover", timed(restart))


def run(name: str, stores: Callable[[str], Callable[[], Store]], updates: int, rounds: int) -> None:
    """Two deployments, one at update 1 and one at `updates`, measured taking turns."""
    with tempfile.TemporaryDirectory(dir="/tmp") as directory:
        young = Deployment(Path(directory) / "young", stores("young"))
        old = Deployment(Path(directory) / "old", stores("old"))
        for deployment in (young, old):
            deployment.cli("set")
            deployment.cli("verify")
        start = time.perf_counter()
        for done in range(0, updates - 1, VERIFY_EVERY):
            old.drive(min(VERIFY_EVERY, updates - 1 - done))
            old.cli("verify")  # the workspace and verify/ follow, as a user's do
        driven = time.perf_counter() - start
        samples: dict[str, dict[str, list[float]]] = {"young": {}, "old": {}}
        for _ in range(rounds):
            measure_once(young, samples["young"])
            measure_once(old, samples["old"])
        generations = [d.server.coordinator.generation for d in (young, old) if d.server]
        for deployment in (young, old):
            assert deployment.server is not None
            deployment.server.stop(grace=0)
    print(
        f"{name}: {updates - 1} updates driven in {driven:.0f} s; generations at the end"
        f" {generations[0]} and {generations[1]}; medians of {rounds} rounds taking turns, ms"
    )
    for what, first in samples["young"].items():
        later = samples["old"][what]
        one, many = statistics.median(first), statistics.median(later)
        goal = "" if what == FLOOR else f" (goal <= {GOAL:.2f})"
        print(
            f"  {what:36} update 1: {one:8.2f}  update {updates}: {many:8.2f}"
            f"  ratio {many / one:.2f}; best {min(first):8.2f} / {min(later):8.2f}"
            f"  ratio {min(later) / min(first):.2f}{goal}"
        )


@contextlib.contextmanager
def configmaps() -> Iterator[Callable[[str], Callable[[], Store]]]:
    with cluster() as running:
        namespaces: list[str] = []

        def stores(name: str) -> Callable[[], Store]:
            namespace = f"bench-flat-{name}-{secrets.token_hex(4)}"
            running.kubectl("create", "namespace", namespace)
            namespaces.append(namespace)
            return lambda: ConfigMapStore(core_api(kubeconfig=running.kubeconfig), namespace)

        try:
            yield stores
        finally:
            for namespace in namespaces:
                running.kubectl("delete", "namespace", namespace, "--wait=false")


def main(updates: int, rounds: int, backends: list[str]) -> None:
    for backend in backends:
        if backend == "files":
            with tempfile.TemporaryDirectory(dir="/tmp") as state:
                run(
                    "files",
                    lambda name, state=state: lambda: FileSystemStore(Path(state) / name),
                    updates,
                    rounds,
                )
        else:
            with configmaps() as stores:
                run("configmaps (real API server)", stores, updates, rounds)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    chosen = [a for a in arguments if a in ("files", "configmaps")] or ["files", "configmaps"]
    numbers = [int(a) for a in arguments if a.isdigit()]
    main(
        numbers[0] if numbers else 1000,
        numbers[1] if len(numbers) > 1 else 5,
        chosen,
    )
