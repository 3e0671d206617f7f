"""The Coordinator's history at scale, in process on the file-system store (issue 29).

1. SetManifest of a manifest of N policies (default 10 000; about 1.9 MB and 3 MB of ~300-byte
   policy documents), against its floor: the same bytes (manifest and every document) written
   once, durably, as one file (`write_atomically`: write, fsync, rename). Taking turns, best of
   3. Goal: at most 0.1 ms per policy, 10 000 in at most 1 s.
2. What a history of U updates (default 1000) costs against the same history at update 1,
   measured in the same run: one more update's SetManifest, GetManifests from the head a client
   saw (what `set` and `verify` send), the original's GetManifests of every manifest (for
   scale: it grows, by design), and a restart (a new Coordinator recovering with the seed).
   Each the best of several calls. Goal: at U = 1000 within 10 % of update 1.

Run: `.venv/bin/python bench/bench_history_scale.py [POLICIES] [UPDATES]`.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' deployment helpers

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from tests.coordinator.conftest import Deployment, policy
from tests.coordinator.crash_step_worker import large_policy

from contrast.atls.reportdata import public_key_der
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.files import write_atomically
from contrast.manifest.ownership import sign_update

ROUNDS = 3


def best_ms(call: Callable[[], object], calls: int) -> float:
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def deployment(directory: Path, names: tuple[str, ...]) -> Deployment:
    policies = {name: policy(name) for name in ("coordinator", "web", "client")}
    policies |= {name: large_policy(name) for name in names if name not in policies}
    return Deployment(
        tee=EmulatedSnp(directory / "tee"),
        owner=ec.generate_private_key(ec.SECP384R1()),
        seedshare=rsa.generate_private_key(65537, 2048),
        policies=policies,
        state_dir=directory / "state",
    )


def set_manifest_at_scale(count: int) -> None:
    names = ("coordinator", "web", *(f"w{index}" for index in range(count - 2)))
    with tempfile.TemporaryDirectory(dir="/tmp") as directory:
        base = Path(directory)
        large = deployment(base, names)
        manifest, documents = large.manifest(names), large.documents(names)
        request = manifest + b"".join(documents)
        sets, floors = [], []
        for round_ in range(ROUNDS):  # taking turns, so both see the same machine load
            coordinator = replace(large, state_dir=base / f"state-{round_}").coordinator()
            start = time.perf_counter()
            coordinator.set_manifest(manifest, documents)
            sets.append(time.perf_counter() - start)
            start = time.perf_counter()
            write_atomically(base / f"floor-{round_}", request, mode=0o600)
            floors.append(time.perf_counter() - start)
        answered = best_ms(coordinator.get_manifests, 3)
    best, floor = min(sets), min(floors)
    print(
        f"SetManifest, {count} policies ({len(manifest) / 1e6:.1f} MB manifest,"
        f" {sum(map(len, documents)) / 1e6:.1f} MB policies): {best:.3f} s,"
        f" {best / count * 1000:.3f} ms a policy (goal <= 0.1);"
        f" floor (the request's bytes written durably once) {floor * 1000:.1f} ms,"
        f" ratio {best / floor:.1f}"
    )
    print(f"GetManifests of it (every policy document): {answered:.1f} ms")


def history_cost(updates: int) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as directory:
        small = deployment(Path(directory), ("coordinator", "web"))
        coordinator = small.coordinator()
        result = coordinator.set_manifest(small.manifest(), small.documents())
        assert result.seed_shares is not None
        shares = result.seed_shares
        seed = shares.decrypt(small.seedshare)
        sans = iter(range(10**9))
        seen = [coordinator.get_manifests().latest.transition_hash]  # what a workspace keeps

        def update() -> float:
            """One owner-signed update after the head, as `contrast set` sends it: timed alone."""
            names = ("coordinator", "web", "client")[: 2 + next(sans) % 2]
            head = coordinator.get_manifests(since=seen[-1]).latest.transition_hash
            seen.append(head)
            manifest = small.manifest(names)
            signature = sign_update(small.owner, manifest, head)
            start = time.perf_counter()
            coordinator.set_manifest(
                manifest,
                small.documents(names),
                previous_transition_hash=head,
                owner_public_key=public_key_der(small.owner.public_key()),
                signature=signature,
            )
            return time.perf_counter() - start

        def restart() -> float:
            """A new Coordinator on the volume, ready once recovered: timed to ready. The count
            of its manifests, walked in the background after, is waited for untimed."""
            start = time.perf_counter()
            restarted = small.coordinator()
            restarted.recover(seed, shares.salt)
            ready = time.perf_counter() - start
            assert restarted.generation > 0
            return ready

        def measure() -> dict[str, float]:
            return {
                "SetManifest (one update)": min(update() for _ in range(5)) * 1000,
                "GetManifests since the client's head": best_ms(
                    lambda: coordinator.get_manifests(since=seen[-1]), 7
                ),
                "GetManifests of all (the original's)": best_ms(coordinator.get_manifests, 3),
                "restart (recover)": min(restart() for _ in range(3)) * 1000,
            }

        at_one = measure()
        for _ in range(updates):
            update()
        at_many = measure()
    for what, first in at_one.items():
        many = at_many[what]
        print(
            f"{what:38} update 1: {first:8.2f} ms, update {updates}: {many:8.2f} ms"
            f" (ratio {many / first:.2f})"
        )


def main(count: int, updates: int) -> None:
    set_manifest_at_scale(count)
    history_cost(updates)


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 10_000,
        int(sys.argv[2]) if len(sys.argv) > 2 else 1000,
    )
