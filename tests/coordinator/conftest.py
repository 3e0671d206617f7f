"""A Coordinator over a real history store, with the emulated SNP TEE as its workloads' TEE."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.atls.issuers import EmulatedSnpIssuer
from contrast.atls.reportdata import public_key_der
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import Coordinator
from contrast.history.history import History
from contrast.history.store import FileSystemStore
from contrast.manifest.emulated import emulated_snp_reference_values
from contrast.manifest.ownership import owner_key_digest, sign_update
from contrast.manifest.verifier import workload_verifier
from contrast.policy.initdata import Initdata
from contrast.seed.shares import public_key_hex


def policy(name: str) -> bytes:
    return Initdata({"policy.rego": f"package agent_policy\n# {name}\n"}).to_toml()


def policy_hash(document: bytes) -> bytes:
    from contrast.policy.initdata import policy_hash as hash_of

    return hash_of(document)


@dataclass
class Deployment:
    tee: EmulatedSnp
    owner: ec.EllipticCurvePrivateKey
    seedshare: rsa.RSAPrivateKey
    policies: dict[str, bytes]
    state_dir: Path

    def manifest(self, names: tuple[str, ...] = ("coordinator", "web"), **extra: Any) -> bytes:
        document = {
            "Policies": {
                policy_hash(self.policies[name]).hex(): {
                    "SANs": [name, "*"],
                    "WorkloadSecretID": f"core/v1/Pod/default/{name}",
                    **({"Role": "coordinator"} if name == "coordinator" else {}),
                }
                for name in names
            },
            "ReferenceValues": {"snp": [emulated_snp_reference_values(self.tee)]},
            "WorkloadOwnerKeyDigests": [owner_key_digest(public_key_der(self.owner.public_key()))],
            "SeedshareOwnerPubKeys": [public_key_hex(self.seedshare.public_key())],
            **extra,
        }
        return json.dumps(document, indent=2).encode() + b"\n"

    def documents(self, names: tuple[str, ...] = ("coordinator", "web")) -> list[bytes]:
        return [self.policies[name] for name in names]

    def issuer(self, name: str) -> EmulatedSnpIssuer:
        return EmulatedSnpIssuer(self.tee, policy_hash(self.policies[name]))

    def coordinator(self) -> Coordinator:
        return Coordinator(History(FileSystemStore(self.state_dir)), verifier_for=workload_verifier)

    def update(self, coordinator: Coordinator, names: tuple[str, ...]) -> bytes:
        """Set the manifest of `names` as an update signed by the owner; the manifest set."""
        manifest = self.manifest(names)
        current = coordinator.get_manifests().latest.transition_hash
        coordinator.set_manifest(
            manifest,
            self.documents(names),
            previous_transition_hash=current,
            owner_public_key=public_key_der(self.owner.public_key()),
            signature=sign_update(self.owner, manifest, current),
        )
        return manifest


@pytest.fixture(scope="session")
def tee_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tee")


@pytest.fixture(scope="session")
def emulated_tee(tee_dir: Path) -> EmulatedSnp:
    return EmulatedSnp(tee_dir)


@pytest.fixture(scope="session")
def seedshare_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(65537, 2048)


@pytest.fixture
def deployment(
    emulated_tee: EmulatedSnp, seedshare_key: rsa.RSAPrivateKey, tmp_path: Path
) -> Deployment:
    names = ("coordinator", "web", "client", "rogue")
    return Deployment(
        tee=emulated_tee,
        owner=ec.generate_private_key(ec.SECP384R1()),
        seedshare=seedshare_key,
        policies={name: policy(name) for name in names},
        state_dir=tmp_path / "state",
    )
