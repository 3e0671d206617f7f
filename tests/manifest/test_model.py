"""Manifest model: the original's field names, validation that names the field, stable bytes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from contrast.manifest.errors import ManifestError
from contrast.manifest.model import Manifest, Role
from contrast.seed.shares import public_key_hex

COORDINATOR_HASH = "ab" * 32
WORKLOAD_HASH = "cd" * 32


def document() -> dict[str, Any]:
    seedshare = rsa.generate_private_key(65537, 2048).public_key()
    return {
        "Policies": {
            COORDINATOR_HASH: {
                "SANs": ["coordinator", "*"],
                "WorkloadSecretID": "apps/v1/StatefulSet/default/coordinator",
                "Role": "coordinator",
            },
            WORKLOAD_HASH: {"SANs": ["web", "*"], "WorkloadSecretID": "apps/v1/Deployment/x/web"},
        },
        "ReferenceValues": {"snp": [{"Platform": "Emulated-SNP"}]},
        "WorkloadOwnerKeyDigests": ["01" * 32],
        "SeedshareOwnerPubKeys": [public_key_hex(seedshare)],
    }


def load(value: dict[str, Any]) -> Manifest:
    return Manifest.from_bytes(json.dumps(value).encode())


def test_round_trip_keeps_the_original_field_names() -> None:
    manifest = load(document())
    assert manifest.coordinator_policy_hashes == [COORDINATOR_HASH]
    assert manifest.policies[WORKLOAD_HASH].role is Role.NONE
    written = json.loads(manifest.to_bytes())
    assert set(written) == {
        "Policies",
        "ReferenceValues",
        "WorkloadOwnerKeyDigests",
        "SeedshareOwnerPubKeys",
    }
    assert written["Policies"][WORKLOAD_HASH]["SANs"] == ["web", "*"]
    assert Manifest.from_bytes(manifest.to_bytes()) == manifest
    assert manifest.to_bytes().endswith(b"}\n")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["Policies"].update({"ABC": {"SANs": []}}), "Policies: .*'ABC' is not a"),
        (
            lambda d: d["Policies"][WORKLOAD_HASH].update({"Role": "admin"}),
            f"Policies.{WORKLOAD_HASH}.Role: ",
        ),
        (lambda d: d["Policies"][COORDINATOR_HASH].pop("Role"), 'no policy has Role "coordinator"'),
        (lambda d: d.update({"ReferenceValues": {}}), "ReferenceValues: .*at least one"),
        (lambda d: d.update({"WorkloadOwnerKeyDigests": ["xyz"]}), "WorkloadOwnerKeyDigests"),
        (lambda d: d.update({"SeedshareOwnerPubKeys": ["00"]}), "SeedshareOwnerPubKeys"),
        (lambda d: d.update({"Unknown": 1}), "Unknown: "),
        (lambda d: d.pop("Policies"), "Policies: Field required"),
    ],
)
def test_invalid_manifests_name_the_field(change: Any, message: str) -> None:
    value = document()
    change(value)
    with pytest.raises(ManifestError, match=message):
        load(value)


@pytest.mark.parametrize("data", [b"", b"{", b"\xff", b"[]", b"null"])
def test_non_manifests_are_refused(data: bytes) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_bytes(data)


def test_a_seedshare_threshold_above_one_is_kept() -> None:
    document_with = {**document(), "SeedshareThreshold": 1}
    assert "SeedshareThreshold" not in json.loads(load(document_with).to_bytes())
    twice = document()["SeedshareOwnerPubKeys"] * 2
    with pytest.raises(ManifestError, match="lists a key twice"):
        load({**document(), "SeedshareOwnerPubKeys": twice, "SeedshareThreshold": 2})
    other = public_key_hex(rsa.generate_private_key(65537, 2048).public_key())
    owners = [*document()["SeedshareOwnerPubKeys"], other]
    manifest = load({**document(), "SeedshareOwnerPubKeys": owners, "SeedshareThreshold": 2})
    assert json.loads(manifest.to_bytes())["SeedshareThreshold"] == 2
    assert Manifest.from_bytes(manifest.to_bytes()) == manifest
