"""The Coordinator's invariants (DESIGN.md), each with the attack it stops."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding

from contrast.atls.reportdata import public_key_der, report_data
from contrast.attestation.evidence import Evidence
from contrast.coordinator.core import Coordinator, Mode
from contrast.coordinator.errors import (
    Conflict,
    InvalidRequest,
    NotReady,
    PermissionDenied,
    StoredStateDamaged,
)
from contrast.manifest.ownership import sign_update
from contrast.seed.engine import SeedEngine
from tests.attestation.dermutations import with_duplicate_extension, with_version
from tests.coordinator.conftest import Deployment, policy_hash

ZERO = bytes(32)


def ready(deployment: Deployment) -> tuple[Coordinator, bytes, bytes]:
    """A Coordinator with the first manifest set, and the seed and salt from its seed shares."""
    coordinator = deployment.coordinator()
    result = coordinator.set_manifest(deployment.manifest(), deployment.documents())
    assert result.seed_shares is not None
    seed = result.seed_shares.decrypt(deployment.seedshare)
    return coordinator, seed, result.seed_shares.salt


def mesh_request(
    coordinator: Coordinator, deployment: Deployment, name: str
) -> tuple[ec.EllipticCurvePrivateKey, bytes, Evidence]:
    key = ec.generate_private_key(ec.SECP256R1())
    nonce = coordinator.new_nonce()
    public_key = public_key_der(key.public_key())
    evidence = deployment.issuer(name).issue(report_data(public_key, nonce))
    return key, nonce, evidence


def test_first_manifest_from_anyone_then_ready(deployment: Deployment) -> None:
    coordinator = deployment.coordinator()
    assert coordinator.mode is Mode.NO_MANIFEST
    with pytest.raises(NotReady, match="no manifest"):
        coordinator.get_manifests()
    result = coordinator.set_manifest(deployment.manifest(), deployment.documents())
    assert coordinator.mode is Mode.READY
    assert result.root_ca.startswith(b"-----BEGIN CERTIFICATE-----")
    assert result.seed_shares is not None
    seed = result.seed_shares.decrypt(deployment.seedshare)
    assert len(seed) == 64
    history = coordinator.get_manifests()
    assert history.manifests == [deployment.manifest()]
    assert sorted(history.policies) == sorted(deployment.documents())


def test_mesh_certificate_for_exactly_the_attested_key(deployment: Deployment) -> None:
    coordinator, _, _ = ready(deployment)
    key, nonce, evidence = mesh_request(coordinator, deployment, "web")
    issued = coordinator.new_mesh_certificate(nonce, public_key_der(key.public_key()), evidence)
    leaf = x509.load_pem_x509_certificates(issued.cert_chain)[0]
    assert leaf.public_key() == key.public_key()
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["web", "*"]
    assert issued.workload_secret is not None
    assert len(issued.workload_secret) == 64


def test_workload_secret_is_derived_from_the_seed(deployment: Deployment) -> None:
    coordinator = deployment.coordinator()
    result = coordinator.set_manifest(deployment.manifest(), deployment.documents())
    assert result.seed_shares is not None
    seed = result.seed_shares.decrypt(deployment.seedshare)
    engine = SeedEngine(seed, result.seed_shares.salt)
    key, nonce, evidence = mesh_request(coordinator, deployment, "web")
    issued = coordinator.new_mesh_certificate(nonce, public_key_der(key.public_key()), evidence)
    assert issued.workload_secret == engine.workload_secret("core/v1/Pod/default/web")
    # The second certificate's secret comes from the state's memo: the same bytes.
    key, nonce, evidence = mesh_request(coordinator, deployment, "web")
    again = coordinator.new_mesh_certificate(nonce, public_key_der(key.public_key()), evidence)
    assert again.workload_secret == issued.workload_secret


def test_policy_hash_not_in_the_manifest_gets_nothing(deployment: Deployment) -> None:
    coordinator, _, _ = ready(deployment)
    key, nonce, evidence = mesh_request(coordinator, deployment, "rogue")
    rogue_hash = policy_hash(deployment.policies["rogue"]).hex()
    with pytest.raises(PermissionDenied, match=f"policy hash {rogue_hash} is not in"):
        coordinator.new_mesh_certificate(nonce, public_key_der(key.public_key()), evidence)


def test_evidence_bound_to_another_key_is_refused(deployment: Deployment) -> None:
    coordinator, _, _ = ready(deployment)
    _, nonce, evidence = mesh_request(coordinator, deployment, "web")
    attacker = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(PermissionDenied, match="report data"):
        coordinator.new_mesh_certificate(nonce, public_key_der(attacker.public_key()), evidence)


def test_replayed_nonce_is_refused(deployment: Deployment) -> None:
    coordinator, _, _ = ready(deployment)
    key, nonce, evidence = mesh_request(coordinator, deployment, "web")
    public_key = public_key_der(key.public_key())
    coordinator.new_mesh_certificate(nonce, public_key, evidence)
    with pytest.raises(PermissionDenied, match="nonce is unknown, expired or already used"):
        coordinator.new_mesh_certificate(nonce, public_key, evidence)


def test_nonce_from_another_coordinator_is_refused(deployment: Deployment) -> None:
    coordinator, _, _ = ready(deployment)
    key = ec.generate_private_key(ec.SECP256R1())
    public_key = public_key_der(key.public_key())
    made_up = bytes(32)
    evidence = deployment.issuer("web").issue(report_data(public_key, made_up))
    with pytest.raises(PermissionDenied, match="nonce"):
        coordinator.new_mesh_certificate(made_up, public_key, evidence)


def test_emulated_evidence_never_meets_real_reference_values(deployment: Deployment) -> None:
    manifest = json.loads(deployment.manifest())
    entry = manifest["ReferenceValues"]["snp"][0]
    entry["Platform"] = "Metal-QEMU-SNP"
    del entry["TrustedRoots"]  # a real platform: AMD's genuine roots
    coordinator = deployment.coordinator()
    real = json.dumps(manifest).encode()
    coordinator.set_manifest(real, deployment.documents())
    key, nonce, evidence = mesh_request(coordinator, deployment, "web")
    with pytest.raises(PermissionDenied, match="untrusted_vcek"):
        coordinator.new_mesh_certificate(nonce, public_key_der(key.public_key()), evidence)


def test_a_real_platform_entry_cannot_name_its_own_roots(deployment: Deployment) -> None:
    real = deployment.manifest().replace(b'"Emulated-SNP"', b'"Metal-QEMU-SNP"')
    coordinator = deployment.coordinator()
    with pytest.raises(InvalidRequest, match="TrustedRoots"):
        coordinator.set_manifest(real, deployment.documents())
    assert coordinator.mode is Mode.NO_MANIFEST


def test_update_needs_a_listed_owner_signature(deployment: Deployment) -> None:
    coordinator, _, _ = ready(deployment)
    current = coordinator.get_manifests().latest.transition_hash
    updated = deployment.manifest(("coordinator", "web", "client"))
    documents = deployment.documents(("coordinator", "web", "client"))
    with pytest.raises(PermissionDenied, match="updates need a workload owner's signature"):
        coordinator.set_manifest(updated, documents, previous_transition_hash=current)
    stranger = ec.generate_private_key(ec.SECP384R1())
    with pytest.raises(PermissionDenied, match="does not list as workload owner"):
        coordinator.set_manifest(
            updated,
            documents,
            previous_transition_hash=current,
            owner_public_key=public_key_der(stranger.public_key()),
            signature=sign_update(stranger, updated, current),
        )
    owner_key = public_key_der(deployment.owner.public_key())
    with pytest.raises(PermissionDenied, match="does not verify"):
        coordinator.set_manifest(
            updated,
            documents,
            previous_transition_hash=current,
            owner_public_key=owner_key,
            signature=sign_update(deployment.owner, deployment.manifest(), current),
        )
    result = coordinator.set_manifest(
        updated,
        documents,
        previous_transition_hash=current,
        owner_public_key=owner_key,
        signature=sign_update(deployment.owner, updated, current),
    )
    assert result.seed_shares is None
    assert coordinator.generation == 2
    other = deployment.manifest(("coordinator", "client"))
    with pytest.raises(Conflict):
        coordinator.set_manifest(
            other,
            deployment.documents(("coordinator", "client")),
            previous_transition_hash=current,
            owner_public_key=owner_key,
            signature=sign_update(deployment.owner, other, current),
        )


def test_a_retried_update_that_made_the_head_is_answered_again_without_moving_it(
    deployment: Deployment,
) -> None:
    """A response lost after the head moved (or a Coordinator killed there): the same update
    sent again gets the same answer, and only with a signature that would have made it."""
    coordinator, _, _ = ready(deployment)
    current = coordinator.get_manifests().latest.transition_hash
    names = ("coordinator", "web", "client")
    updated, documents = deployment.manifest(names), deployment.documents(names)
    owner_key = public_key_der(deployment.owner.public_key())
    first = coordinator.set_manifest(
        updated,
        documents,
        previous_transition_hash=current,
        owner_public_key=owner_key,
        signature=sign_update(deployment.owner, updated, current),
    )
    head = coordinator.get_manifests().latest
    again = coordinator.set_manifest(
        updated,
        documents,
        previous_transition_hash=current,
        owner_public_key=owner_key,
        signature=sign_update(deployment.owner, updated, current),
    )
    assert again == first
    assert coordinator.get_manifests().latest == head
    assert coordinator.generation == 2
    stranger = ec.generate_private_key(ec.SECP384R1())
    with pytest.raises(PermissionDenied, match="does not list as workload owner"):
        coordinator.set_manifest(
            updated,
            documents,
            previous_transition_hash=current,
            owner_public_key=public_key_der(stranger.public_key()),
            signature=sign_update(stranger, updated, current),
        )
    with pytest.raises(PermissionDenied, match="does not verify"):
        coordinator.set_manifest(
            updated,
            documents,
            previous_transition_hash=current,
            owner_public_key=owner_key,
            signature=sign_update(deployment.owner, updated, head.transition_hash),
        )
    assert coordinator.get_manifests().latest == head


def test_restart_needs_recovery_with_the_right_seed(deployment: Deployment) -> None:
    first, seed, salt = ready(deployment)
    root_before = x509.load_pem_x509_certificate(first.get_manifests().root_ca)
    restarted = deployment.coordinator()
    assert restarted.mode is Mode.RECOVERY
    with pytest.raises(NotReady, match="recovery mode"):
        restarted.get_manifests()
    with pytest.raises(NotReady, match="recovery mode"):
        restarted.set_manifest(deployment.manifest(), deployment.documents())
    with pytest.raises(PermissionDenied, match="seed does not belong"):
        restarted.recover(bytes(64), salt)
    restarted.recover(seed, salt)
    assert restarted.mode is Mode.READY
    assert restarted.get_manifests().manifests == [deployment.manifest()]
    root_after = x509.load_pem_x509_certificate(restarted.get_manifests().root_ca)
    assert root_after.public_key() == root_before.public_key()
    with pytest.raises(NotReady, match="already recovered"):
        restarted.recover(seed, salt)
    key, nonce, evidence = mesh_request(restarted, deployment, "web")
    restarted.new_mesh_certificate(nonce, public_key_der(key.public_key()), evidence)


def test_flipped_byte_in_the_stored_history_is_detected(deployment: Deployment) -> None:
    _, seed, salt = ready(deployment)
    manifests = deployment.state_dir / "manifests"
    stored = next(manifests.iterdir())
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0x01
    stored.write_bytes(bytes(data))
    restarted = deployment.coordinator()
    with pytest.raises(StoredStateDamaged, match=f"manifests/{stored.name} does not hash to its"):
        restarted.recover(seed, salt)
    assert restarted.mode is Mode.RECOVERY


def test_rolled_back_history_is_detected(
    deployment: Deployment, tmp_path_factory: pytest.TempPathFactory
) -> None:
    coordinator, seed, salt = ready(deployment)
    snapshot = tmp_path_factory.mktemp("snapshot") / "state"
    shutil.copytree(deployment.state_dir, snapshot)
    current = coordinator.get_manifests().latest.transition_hash
    updated = deployment.manifest(("coordinator", "web", "client"))
    coordinator.set_manifest(
        updated,
        deployment.documents(("coordinator", "web", "client")),
        previous_transition_hash=current,
        owner_public_key=public_key_der(deployment.owner.public_key()),
        signature=sign_update(deployment.owner, updated, current),
    )
    seen_by_owner = coordinator.get_manifests().latest.transition_hash
    shutil.rmtree(deployment.state_dir)
    shutil.copytree(snapshot, deployment.state_dir)  # the attacker restores the old volume
    restarted = deployment.coordinator()
    with pytest.raises(PermissionDenied, match="rolled back"):
        restarted.recover(seed, salt, expected_transition_hash=seen_by_owner)
    restarted.recover(seed, salt, expected_transition_hash=current)  # an older head is fine


def test_a_revoked_vcek_is_refused(deployment: Deployment) -> None:
    coordinator, _, _ = ready(deployment)
    key, nonce, evidence = mesh_request(coordinator, deployment, "web")
    crl = deployment.tee.crl([deployment.tee.vcek], now=datetime.now(UTC))
    with_crl = replace(
        evidence, endorsements=(*evidence.endorsements, crl.public_bytes(Encoding.DER))
    )
    with pytest.raises(PermissionDenied, match="certificate_revoked"):
        coordinator.new_mesh_certificate(nonce, public_key_der(key.public_key()), with_crl)


@pytest.mark.parametrize("malformation", ["duplicate extension", "unknown version"])
def test_a_malformed_vcek_is_a_counted_attestation_failure(
    deployment: Deployment, malformation: str
) -> None:
    coordinator, _, _ = ready(deployment)
    key, nonce, evidence = mesh_request(coordinator, deployment, "web")
    vcek = deployment.tee.vcek.public_bytes(Encoding.DER)
    assert vcek in evidence.endorsements
    broken = (
        with_duplicate_extension(vcek)
        if malformation == "duplicate extension"
        else with_version(vcek, 5)
    )
    endorsements = tuple(broken if e == vcek else e for e in evidence.endorsements)
    with pytest.raises(PermissionDenied, match="malformed_certificate"):
        coordinator.new_mesh_certificate(
            nonce, public_key_der(key.public_key()), replace(evidence, endorsements=endorsements)
        )
    failures = coordinator.metrics.registry.get_sample_value(
        "contrast_meshapi_attestation_failures_total"
    )
    assert failures == 1


def test_a_ca_sealed_by_another_seed_for_the_same_transition_is_never_served(
    deployment: Deployment, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two deployments of one first manifest share its transition hash. An attacker who holds
    the other one's seed (so knows its mesh CA key) and can write this one's store puts that CA
    in this seed's slot: it does not open with this seed, and a restart refuses the state
    instead of serving it. In the other seed's slot, where it is harmless, it is ignored."""
    first, seed, salt = ready(deployment)
    mesh_ca = first.get_manifests().mesh_ca
    other = replace(deployment, state_dir=tmp_path_factory.mktemp("other") / "state")
    ready(other)
    ours = list((deployment.state_dir / "authorities").iterdir())
    theirs = list((other.state_dir / "authorities").iterdir())
    assert len(ours) == len(theirs) == 1
    assert ours[0].name.split("-")[0] == theirs[0].name.split("-")[0]  # one transition
    assert ours[0].name != theirs[0].name  # two slots

    shutil.copy(theirs[0], deployment.state_dir / "authorities" / theirs[0].name)
    restarted = deployment.coordinator()
    restarted.recover(seed, salt)
    assert restarted.get_manifests().mesh_ca == mesh_ca

    shutil.copy(theirs[0], ours[0])
    restarted = deployment.coordinator()
    with pytest.raises(StoredStateDamaged, match="does not open with this seed"):
        restarted.recover(seed, salt)
    assert restarted.mode is Mode.RECOVERY
