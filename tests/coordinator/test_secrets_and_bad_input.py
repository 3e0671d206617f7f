"""Invariant 4 (the seed leaves only encrypted) and 8 (bad requests get typed errors)."""

from __future__ import annotations

import logging

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.atls.reportdata import public_key_der
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.attestation.evidence import Evidence, Tee
from contrast.coordinator.core import Coordinator
from contrast.coordinator.errors import CoordinatorError, InvalidRequest, PermissionDenied
from contrast.manifest.ownership import sign_update
from contrast.seed.engine import SeedEngine
from tests.coordinator.conftest import Deployment, policy


def test_the_seed_is_nowhere_but_in_the_encrypted_shares(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    coordinator = deployment.coordinator()
    result = coordinator.set_manifest(deployment.manifest(), deployment.documents())
    assert result.seed_shares is not None
    seed = result.seed_shares.decrypt(deployment.seedshare)
    engine = SeedEngine(seed, result.seed_shares.salt)
    secrets = [seed, seed.hex().encode(), engine.workload_secret("core/v1/Pod/default/web")]
    stored = [path.read_bytes() for path in deployment.state_dir.rglob("*") if path.is_file()]
    shown = [result.root_ca, result.mesh_ca, result.seed_shares.to_json(), caplog.text.encode()]
    for blob in stored + shown:
        for secret in secrets:
            assert secret not in blob
    assert str(seed) not in repr(coordinator.__dict__)


VALID_KEY = public_key_der(ec.generate_private_key(ec.SECP256R1()).public_key())


@pytest.fixture(scope="module")
def ready_coordinator(
    tmp_path_factory: pytest.TempPathFactory,
    emulated_tee: EmulatedSnp,
    seedshare_key: rsa.RSAPrivateKey,
) -> Coordinator:
    names = ("coordinator", "web")
    deployment = Deployment(
        emulated_tee,
        ec.generate_private_key(ec.SECP384R1()),
        seedshare_key,
        {name: policy(name) for name in names},
        tmp_path_factory.mktemp("state"),
    )
    coordinator = deployment.coordinator()
    coordinator.set_manifest(deployment.manifest(), deployment.documents())
    return coordinator


@settings(max_examples=100)
@given(
    platform=st.sampled_from(list(Tee)),
    report=st.binary(max_size=2000),
    endorsements=st.lists(st.binary(max_size=300), max_size=3),
    public_key=st.one_of(st.just(VALID_KEY), st.binary(max_size=200)),
)
def test_garbage_mesh_requests_get_typed_refusals(
    ready_coordinator: Coordinator,
    platform: Tee,
    report: bytes,
    endorsements: list[bytes],
    public_key: bytes,
) -> None:
    nonce = ready_coordinator.new_nonce()
    evidence = Evidence(platform, report, tuple(endorsements))
    with pytest.raises(CoordinatorError):
        ready_coordinator.new_mesh_certificate(nonce, public_key, evidence)


@settings(max_examples=100)
@given(manifest=st.binary(max_size=500), policies=st.lists(st.binary(max_size=50), max_size=3))
def test_garbage_manifests_get_typed_refusals(
    ready_coordinator: Coordinator, manifest: bytes, policies: list[bytes]
) -> None:
    with pytest.raises(CoordinatorError):
        ready_coordinator.set_manifest(manifest, policies)


DEEP = b"[" * 100_000 + b"]" * 100_000


def test_a_deeply_nested_first_manifest_is_invalid(deployment: Deployment) -> None:
    with pytest.raises(InvalidRequest, match="the manifest nests deeper than 32 levels"):
        deployment.coordinator().set_manifest(DEEP, [])


def test_an_update_is_authorised_before_its_manifest_is_parsed(deployment: Deployment) -> None:
    coordinator = deployment.coordinator()
    coordinator.set_manifest(deployment.manifest(), deployment.documents())
    current = coordinator.get_manifests().latest.transition_hash
    with pytest.raises(PermissionDenied, match="updates need a workload owner's signature"):
        coordinator.set_manifest(DEEP, [], previous_transition_hash=current)
    stranger = ec.generate_private_key(ec.SECP384R1())
    with pytest.raises(PermissionDenied, match="does not list as workload owner"):
        coordinator.set_manifest(
            DEEP,
            [],
            previous_transition_hash=current,
            owner_public_key=public_key_der(stranger.public_key()),
            signature=sign_update(stranger, DEEP, current),
        )
    # The owner's own malformed update is parsed, and refused for what it is.
    with pytest.raises(InvalidRequest, match="nests deeper"):
        coordinator.set_manifest(
            DEEP,
            [],
            previous_transition_hash=current,
            owner_public_key=public_key_der(deployment.owner.public_key()),
            signature=sign_update(deployment.owner, DEEP, current),
        )
