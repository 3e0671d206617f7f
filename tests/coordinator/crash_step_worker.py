"""Sends one SetManifest and kills itself right after its N-th store write: test_crash_steps.py's.

Usage: python -m tests.coordinator.crash_step_worker STATE_DIR TEE_DIR KEYS_DIR KIND N

KIND `first` sets the first manifest on an empty state; `update` recovers with KEYS_DIR's seed
shares, then sends the owner's update; `large-first` and `large-update` do the same with 10 000
more workloads in each manifest (chunked manifest, several policy packs), `generated-first` and
`generated-update` with 10 000 policies of the size and shape `contrast generate` writes (~57 KB,
the same rules around each pod's data: 568 MB sent, a few MB of delta packs stored).

Each write the request makes is printed (its key) before the next;
the N-th is followed by SIGKILL, so nothing after it runs (no finally, no flush, no response).
Exit status 0 and `done` mean the request made fewer than N writes.
"""

from __future__ import annotations

import functools
import hashlib
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.atls.reportdata import public_key_der
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Coordinator, SetManifestResult
from contrast.history.history import History
from contrast.history.store import FileSystemStore, Store
from contrast.images.model import ImageConfig, ImageFacts
from contrast.kuberesource.workloads import Workload
from contrast.manifest.ownership import sign_update
from contrast.manifest.verifier import workload_verifier
from contrast.policy.generate import PolicyGenerator, default_rules
from contrast.policy.initdata import Initdata
from contrast.policy.settings import default_settings
from contrast.seed.shares import SeedShareDocument
from tests.coordinator.conftest import Deployment, policy

UPDATED = ("coordinator", "web", "client")
SHARES = "seed-shares.json"
LARGE = tuple(f"w{index}" for index in range(10_000))


def large_policy(name: str) -> bytes:
    """A document of about 300 bytes, 200 of them hex of the name's hash: each one's own, as
    little alike as hex can be, so 10 000 of them still fill two delta packs."""
    digits = hashlib.shake_256(name.encode()).hexdigest(100)
    return Initdata({"policy.rego": f"package agent_policy\n# {name}\n# {digits}\n"}).to_toml()


_PLACEHOLDER = "wplaceholder"
_IMAGE = "registry.example/app@sha256:" + "ab" * 32


@functools.cache
def _generated_template() -> bytes:
    """The initdata `contrast generate` writes for a one-container Deployment (the packaged
    rules and settings), made once: each workload's is this with its own name."""
    settings = default_settings()
    pause = ImageFacts(settings.pause_image, "sha256:" + "00" * 32, ImageConfig.from_json({}))
    app = ImageFacts(_IMAGE, "sha256:" + "00" * 32, ImageConfig.from_json({"Cmd": ["/app"]}))
    resource = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": _PLACEHOLDER},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": _PLACEHOLDER}},
                "spec": {"containers": [{"name": "app", "image": _IMAGE}]},
            }
        },
    }
    generator = PolicyGenerator(default_rules(), settings)
    images = {settings.pause_image: pause, _IMAGE: app}
    return generator.generate(Workload(resource), images).initdata_toml


def generated_policy(name: str) -> bytes:
    """A generated-size policy (about 57 KB): `contrast generate`'s for a workload `name`."""
    return _generated_template().replace(_PLACEHOLDER.encode(), name.encode())


def _many(kind: str) -> tuple[str, ...]:
    return LARGE if kind.startswith(("large-", "generated-")) else ()


def first_names(kind: str) -> tuple[str, ...]:
    return ("coordinator", "web", *_many(kind))


def updated_names(kind: str) -> tuple[str, ...]:
    return (*UPDATED, *_many(kind))


class DiesAfterWrites:
    """A store whose process dies by SIGKILL right after its `limit`-th write once armed."""

    def __init__(self, store: Store, limit: int) -> None:
        self._store = store
        self._limit = limit
        self._writes = 0
        self.armed = False

    def get(self, key: str) -> bytes | None:
        return self._store.get(key)

    def names(self, kind: str) -> list[str]:
        return self._store.names(kind)

    def describe(self, key: str) -> str:
        return self._store.describe(key)

    def put(self, key: str, value: bytes) -> None:
        self._store.put(key, value)
        self._wrote(key)

    def put_many(self, entries: Mapping[str, bytes]) -> None:
        # One write at a time, each a place to die: every state a kill inside a batch can leave
        # (some entries in place, each whole: `Store.put_many`) is one of these. The batch's own
        # kills, before its sync and between its renames, are tests/history/test_batches.py's.
        for key, value in entries.items():
            self.put(key, value)

    def compare_and_swap(self, key: str, expected: bytes | None, value: bytes) -> None:
        self._store.compare_and_swap(key, expected, value)
        self._wrote(key)

    def _wrote(self, key: str) -> None:
        if not self.armed:
            return
        self._writes += 1
        print(key, flush=True)
        if self._writes == self._limit:
            os.kill(os.getpid(), signal.SIGKILL)


def load_deployment(state_dir: Path, tee_dir: Path, keys: Path, kind: str = "first") -> Deployment:
    owner = serialization.load_pem_private_key((keys / "owner.pem").read_bytes(), None)
    seedshare = serialization.load_pem_private_key((keys / "seedshare.pem").read_bytes(), None)
    assert isinstance(owner, ec.EllipticCurvePrivateKey)
    assert isinstance(seedshare, rsa.RSAPrivateKey)
    policies = {name: policy(name) for name in UPDATED}
    make = generated_policy if kind.startswith("generated-") else large_policy
    policies.update({name: make(name) for name in updated_names(kind)[len(UPDATED) :]})
    return Deployment(EmulatedSnp(tee_dir), owner, seedshare, policies, state_dir)


def send(
    coordinator: Coordinator, deployment: Deployment, kind: str, previous: bytes
) -> SetManifestResult:
    """The request of `kind`: the same manifest, previous transition and signer on every try."""
    if not kind.endswith("update"):
        names = first_names(kind)
        return coordinator.set_manifest(deployment.manifest(names), deployment.documents(names))
    manifest = deployment.manifest(updated_names(kind))
    return coordinator.set_manifest(
        manifest,
        deployment.documents(updated_names(kind)),
        previous_transition_hash=previous,
        owner_public_key=public_key_der(deployment.owner.public_key()),
        signature=sign_update(deployment.owner, manifest, previous),
    )


def recover(coordinator: Coordinator, deployment: Deployment, keys: Path) -> None:
    document = SeedShareDocument.from_json((keys / SHARES).read_bytes())
    coordinator.recover(document.decrypt(deployment.seedshare), document.salt)


def main(state_dir: Path, tee_dir: Path, keys: Path, kind: str, limit: int) -> None:
    deployment = load_deployment(state_dir, tee_dir, keys, kind)
    store = DiesAfterWrites(FileSystemStore(state_dir), limit)
    coordinator = Coordinator(History(store), verifier_for=workload_verifier)
    previous = b""
    if kind.endswith("update"):
        recover(coordinator, deployment, keys)
        previous = coordinator.get_manifests().latest.transition_hash
    store.armed = True
    send(coordinator, deployment, kind, previous)
    print("done", flush=True)


if __name__ == "__main__":
    state, tee, keys = (Path(argument) for argument in sys.argv[1:4])
    main(state, tee, keys, sys.argv[4], int(sys.argv[5]))
