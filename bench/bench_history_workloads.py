"""10 000 workloads end to end (issue 29): certificates, recovery, real-size policies over gRPC.

1. Certificate cost against the manifest's size: two Coordinators in process on files, one with
   a manifest of 2 policies and one of N (default 10 000, 300-byte documents), each issuing
   certificates for a workload of its manifest (GetNonce and NewMeshCert's work in CPU time of
   the calling thread, evidence made outside the clock), taking turns in short loops. Printed:
   the median cost per certificate of each, and the median of the per-round ratios. Goal:
   within 5 %.
2. Recovery of the N-policy state against the 2-policy one: a new Coordinator on the volume,
   recovered with the seed (the active manifest and every policy document re-hashed), taking
   turns.
3. Generated-size policies (the project's rules and settings with the workload's name: about
   54 KB of initdata each) through the real gRPC client and server: a SetManifest of N of them
   and the GetManifests that sends them back, with the request's size and this process's peak
   memory (client and server both). Floor: the request's bytes hashed once (sha256), as the
   Coordinator must.
4. `contrast set` as a process on a workspace of N workloads with generated-size policies and
   generate's YAML memo, against a Coordinator in its own process (`bench_set_cli`'s), taking
   turns with the `src` given by `--before` (A/B). Floor: `python -c pass`.

Run: `.venv/bin/python bench/bench_history_workloads.py [N] [ROUNDS] [--before SRC] [--only 1234]`.
"""

from __future__ import annotations

import hashlib
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' deployment helpers

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from tests.coordinator.conftest import Deployment, policy, policy_hash
from tests.coordinator.crash_step_worker import large_policy

from abrounds import taking_turns, trees
from bench_set_cli import YAML_CACHE, Timing, floor, print_best, remember, run_set, serving
from contrast.api import userapi_pb2
from contrast.api.services import UserApiClient
from contrast.atls.client import connect_attested
from contrast.atls.identity import TlsIdentity
from contrast.atls.issuers import TeeKind
from contrast.atls.reportdata import public_key_der, report_data
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Coordinator, utc_now
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.local.workspace import DemoWorkload, emulated_reference_values, write_workspace
from contrast.manifest.model import Manifest
from contrast.manifest.verifier import coordinator_verifier
from contrast.policy.initdata import Initdata

ASSETS = Path(__file__).resolve().parents[1] / "src" / "contrast" / "policy" / "assets"
RULES = (ASSETS / "rules.rego").read_text() + (ASSETS / "settings.json").read_text()
CERTIFICATES = 40  # a loop


def generated_policy(name: str) -> bytes:
    return Initdata({"policy.rego": f"{RULES}\n# {name}\n"}).to_toml()


def deployment(
    directory: Path, names: tuple[str, ...], make: Callable[[str], bytes] = large_policy
) -> Deployment:
    policies = {name: policy(name) for name in ("coordinator", "web")}
    policies |= {name: make(name) for name in names if name not in policies}
    return Deployment(
        tee=EmulatedSnp(directory / "tee"),
        owner=ec.generate_private_key(ec.SECP384R1()),
        seedshare=rsa.generate_private_key(65537, 2048),
        policies=policies,
        state_dir=directory / "state",
    )


def names_of(count: int) -> tuple[str, ...]:
    return ("coordinator", "web", *(f"w{index}" for index in range(count - 2)))


def certificates_and_recovery(count: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as directory:
        base = Path(directory)
        small = deployment(base / "small", names_of(2))
        large = deployment(base / "large", names_of(count))
        seeds = {}
        coordinators = {}
        for name, made in (("2", small), (str(count), large)):
            names = names_of(2 if made is small else count)
            coordinator = made.coordinator()
            result = coordinator.set_manifest(made.manifest(names), made.documents(names))
            assert result.seed_shares is not None
            seeds[name] = (result.seed_shares.decrypt(made.seedshare), result.seed_shares.salt)
            coordinators[name] = (made, coordinator)

        def issue(made: Deployment, coordinator: Coordinator) -> float:
            """CERTIFICATES certificates for `web`; CPU seconds of this thread each (the
            machine's other load does not count), evidence outside the clock."""
            issuer = made.issuer("web")
            spent = 0.0
            for _ in range(CERTIFICATES):
                key = public_key_der(ec.generate_private_key(ec.SECP256R1()).public_key())
                start = time.thread_time()
                nonce = coordinator.new_nonce()
                spent += time.thread_time() - start
                evidence = issuer.issue(report_data(key, nonce))
                start = time.thread_time()
                coordinator.new_mesh_certificate(nonce, key, evidence)
                spent += time.thread_time() - start
            return spent / CERTIFICATES

        costs = taking_turns(  # short loops
            rounds * 5, {name: partial(issue, *pair) for name, pair in coordinators.items()}
        )
        ratios = [b / a for a, b in zip(*costs.values(), strict=True)]
        first, second = (statistics.median(c) * 1000 for c in costs.values())
        print(
            f"certificate (GetNonce + NewMeshCert in process, CPU), 2 policies: {first:.3f} ms,"
            f" {count} policies: {second:.3f} ms; median ratio of {len(ratios)} rounds"
            f" {statistics.median(ratios):.3f} (goal within 5 %)"
        )

        def recover(name: str) -> float:
            """Seconds of a new Coordinator on the volume recovering with its seed."""
            start = time.perf_counter()
            coordinators[name][0].coordinator().recover(*seeds[name])
            return time.perf_counter() - start

        recoveries = taking_turns(rounds, {name: partial(recover, name) for name in coordinators})
        one, many = (statistics.median(r) * 1000 for r in recoveries.values())
        print(
            f"recovery (new Coordinator on the volume, Recover), 2 policies: {one:.1f} ms,"
            f" {count} policies: {many:.1f} ms (medians of {rounds})"
        )


def real_size_over_grpc(count: int) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as directory:
        names = names_of(count)
        made = deployment(Path(directory), names, make=generated_policy)
        manifest, documents = made.manifest(names), made.documents(names)
        server = CoordinatorServer(
            made.coordinator(),
            made.issuer("coordinator"),
            TlsIdentity.generate(now=utc_now()),
            host="127.0.0.1",
            ports=Ports(0, 0, 0),
        )
        server.start()
        try:
            verifier = coordinator_verifier(
                Manifest.from_bytes(manifest), [policy_hash(made.policies["coordinator"])]
            )
            connection = connect_attested(
                f"127.0.0.1:{server.ports.user_api}", verifier, now=datetime.now(UTC)
            )
            client = UserApiClient(connection.channel, timeout=3600)
            request = userapi_pb2.SetManifestRequest(Manifest=manifest, Policies=documents)
            size = request.ByteSize()
            start = time.perf_counter()
            hashlib.sha256(b"".join(documents)).digest()
            floor = time.perf_counter() - start
            start = time.perf_counter()
            client.set_manifest(request)
            set_s = time.perf_counter() - start
            start = time.perf_counter()
            history = client.get_manifests()
            get_s = time.perf_counter() - start
            assert len(history.Policies) == count
            connection.close()
        finally:
            server.stop(grace=0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"generated-size policies over gRPC, {count} ({size / 1e6:.0f} MB request): SetManifest"
        f" {set_s:.1f} s, GetManifests of them {get_s:.1f} s; floor (sha256 of the bytes once)"
        f" {floor:.2f} s; peak memory of client and server {peak:.0f} MB"
    )


@dataclass(frozen=True)
class GeneratedWorkload(DemoWorkload):
    """A demo workload whose initdata is generated-size (its policy made once)."""

    def initdata(self) -> bytes:
        return _generated(self.name)


_MADE: dict[str, bytes] = {}


def _generated(name: str) -> bytes:
    if name not in _MADE:
        _MADE[name] = generated_policy(name)
    return _MADE[name]


def cli_set(count: int, rounds: int, sources: dict[str, Path]) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as temporary:
        base = Path(temporary)
        EmulatedSnp(base / "tee")
        workloads: list[DemoWorkload] = [DemoWorkload("coordinator", role="coordinator")]
        workloads += [GeneratedWorkload(f"w{i}") for i in range(count - 1)]
        values = emulated_reference_values(TeeKind.EMULATED_SNP, base / "tee")
        workspace = base / "workspace"
        write_workspace(workspace, values, workloads)
        remember(workspace, workspace / YAML_CACHE)
        with serving(base) as command:
            measures: dict[str, Callable[[], Timing]] = {"python -c pass": floor}
            measures |= {name: partial(run_set, command, src) for name, src in sources.items()}
            times = taking_turns(rounds, measures)
    print(f"contrast set through the CLI, {count} workloads of generated-size policies, memo:")
    print_best(times)


def main(argv: list[str]) -> None:
    sources = trees(argv)
    only = "1234"
    if "--only" in argv:
        at = argv.index("--only")
        only = argv[at + 1]
        del argv[at : at + 2]
    count = int(argv[0]) if argv else 10_000
    rounds = int(argv[1]) if len(argv) > 1 else 3
    if "1" in only or "2" in only:
        certificates_and_recovery(count, rounds)
    if "3" in only:
        real_size_over_grpc(count)
    if "4" in only:
        cli_set(count, rounds, sources)


if __name__ == "__main__":
    main(sys.argv[1:])
