"""Manifest model: the original's field names, validation that names the field, stable bytes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from contrast.manifest.errors import ManifestError
from contrast.manifest.model import Manifest, Role
from contrast.seed.shares import public_key_hex
from tests.fresh_python import printed_by

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
        "ReferenceValues": {
            "snp": [{"Platform": "Metal-QEMU-SNP", "TrustedMeasurement": "00" * 48}]
        },
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
        (lambda d: d.pop("Policies"), "Policies: required"),
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


REAL_SNP = {"Platform": "Metal-QEMU-SNP", "TrustedMeasurement": "00" * 48}
ROOTS = {"ARK": "-----BEGIN CERTIFICATE-----", "ASK": "-----BEGIN CERTIFICATE-----"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # A misspelt rule would be no rule: refused when the manifest is read, not at first use.
        ({"snp": [{**REAL_SNP, "MinimumTcb": {}}]}, r"snp\[0\]: unknown SNP .*MinimumTcb"),
        ({"snp": [REAL_SNP, {**REAL_SNP, "VMPL": 7}]}, r"snp\[1\]: VMPL must be 0..3"),
        ({"snp": [{"Platform": "Emulated-SNP"}]}, "needs TrustedRoots ARK and ASK"),
        ({"snp": [{**REAL_SNP, "TrustedRoots": ROOTS}]}, "only Emulated-SNP entries may name"),
        ({"tdx": [{"Platform": "Metal-QEMU-TDX", "MrTd": "00" * 48, "Emulated": True}]},
         "only Emulated-TDX entries may be emulated"),
        ({"tdx": [{"Platform": "Emulated-TDX", "MrTd": "00" * 48, "TrustedRoots": {"RootCA": ""}}]},
         'must say "Emulated": true'),
        ({"snp": [REAL_SNP], "sev": []}, "ReferenceValues.sev: not a field"),
        ({"snp": [{**REAL_SNP, "Platform": 1}]}, r"snp\[0\].Platform: must be a string"),
    ],
)  # fmt: skip
def test_reference_values_are_typed_when_read(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load({**document(), "ReferenceValues": values})


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"SANs": "web"}, "SANs: must be a list of strings"),
        ({"SANs": ["web", 1]}, "SANs: must be a list of strings"),
        ({"SANs": [], "WorkloadSecretID": 5}, "WorkloadSecretID: must be a string"),
        ({"SANs": [], "Roles": ""}, "Roles: not a field of the manifest"),
        ({"WorkloadSecretID": "x"}, "SANs: required"),
        (["web"], "must be an object"),
    ],
)
def test_policy_entries_are_checked(policy: Any, message: str) -> None:
    value = document()
    value["Policies"][WORKLOAD_HASH] = policy
    with pytest.raises(ManifestError, match=f"Policies.{WORKLOAD_HASH}.*{message}"):
        load(value)


@pytest.mark.parametrize("threshold", [True, 1.0, "1", None])
def test_a_threshold_is_a_whole_number(threshold: Any) -> None:
    with pytest.raises(ManifestError, match="SeedshareThreshold: must be a whole number"):
        load({**document(), "SeedshareThreshold": threshold})


def test_a_draft_may_hold_only_reference_values_and_the_unfilled_come_from_the_type() -> None:
    entry = {**REAL_SNP, "MinimumTCB": {"BootloaderVersion": None, "TEEVersion": 3}}
    data = json.dumps({"ReferenceValues": {"snp": [entry]}}).encode()
    with pytest.raises(ManifestError, match="Policies: required"):
        Manifest.from_bytes(data)
    draft = Manifest.from_bytes(data, draft=True)
    assert draft.reference_values.unfilled() == [
        "snp[0] (Metal-QEMU-SNP) MinimumTCB.BootloaderVersion"
    ]
    assert draft.reference_values.snp[0].reference.minimum_tcb.tee == 3


def test_the_manifest_is_read_as_json_reads_it_within_its_bounds() -> None:
    # A lone surrogate escape: json (and so the manifest, as before) reads it.
    value = document()
    value["Policies"][WORKLOAD_HASH]["SANs"] = ["\ud800"]
    manifest = Manifest.from_bytes(json.dumps(value).encode())
    assert manifest.policies[WORKLOAD_HASH].sans == ("\ud800",)
    with pytest.raises(ManifestError, match="nests deeper than 32"):
        Manifest.from_bytes(b"[" * 40 + b"\xff")
    with pytest.raises(ManifestError, match="NaN is not a JSON value"):
        Manifest.from_bytes(b'{"SeedshareThreshold": NaN}')


def test_reading_a_manifest_needs_nothing_the_coordinator_image_lacks() -> None:
    # The Coordinator's image carries no orjson (imagebuild/spec.py); a manifest without a
    # threshold, checked before, loads neither the TEE modules nor shamir-mnemonic (generate).
    code = (
        "import sys, json; from contrast.manifest.model import Manifest;"
        f" data = json.dumps({document()!r}).encode();"
        " Manifest.from_bytes(data, checked=True);"
        " print(*(m in sys.modules for m in ('orjson', 'pydantic', 'shamir_mnemonic',"
        " 'contrast.attestation.snp.reference')));"
        " Manifest.from_bytes(data); print('contrast.attestation.snp.reference' in sys.modules)"
    )
    assert printed_by(code) == ["False", "False", "False", "False", "True"]
