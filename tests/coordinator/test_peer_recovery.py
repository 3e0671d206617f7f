"""Peer recovery over the mesh API: a replica in recovery mode gets the seed from a ready peer.

A ready replica serves its mesh API on loopback (the same server as `contrast coordinator`); a
replica on the same history in recovery mode asks it through `contrast.coordinator.peers`. Both
sides attest: the peer hands the seed only to evidence of a Coordinator of its manifest, bound to
the requester's key and the peer's nonce (used once); the requester accepts only an answer
vouched for by a Coordinator of the stored manifest. Refusals are typed and carry no secret.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, x25519

from contrast.api import meshapi_pb2
from contrast.api.convert import evidence_to_proto
from contrast.api.services import MeshApiClient
from contrast.atls.client import fetch_certificate, pinned_channel
from contrast.atls.identity import TlsIdentity
from contrast.atls.peer import Issuer
from contrast.atls.reportdata import public_key_der, report_data
from contrast.coordinator import handover
from contrast.coordinator.core import Coordinator, Handover, Mode, utc_now
from contrast.coordinator.errors import (
    EvidenceRefused,
    InvalidRequest,
    NonceRefused,
    NotACoordinator,
    PermissionDenied,
)
from contrast.coordinator.peers import (
    PeerRecovery,
    PeerRecoveryFailed,
    PeerSources,
    recover_from,
    resolve,
)
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.history.history import History
from contrast.history.store import FileSystemStore
from contrast.manifest.verifier import workload_verifier
from tests.coordinator.conftest import Deployment
from tests.coordinator.test_replicas import certificate


def replica(deployment: Deployment, state_dir: Path | None = None) -> Coordinator:
    store = FileSystemStore(state_dir or deployment.state_dir)
    return Coordinator(History(store), verifier_for=workload_verifier)


@contextmanager
def serving(coordinator: Coordinator, issuer: Issuer) -> Iterator[str]:
    """The replica's servers on loopback; the mesh API's HOST:PORT."""
    server = CoordinatorServer(
        coordinator,
        issuer,
        TlsIdentity.generate(now=utc_now()),
        host="127.0.0.1",
        ports=Ports(0, 0, 0),
    )
    server.start()
    try:
        yield f"127.0.0.1:{server.ports.mesh_api}"
    finally:
        server.stop(0)


@pytest.fixture
def ready(deployment: Deployment) -> Coordinator:
    coordinator = replica(deployment)
    coordinator.set_manifest(deployment.manifest(), deployment.documents())
    return coordinator


def test_a_restarted_replica_recovers_from_a_ready_peer_and_shares_its_mesh_ca(
    deployment: Deployment, ready: Coordinator
) -> None:
    restarted = replica(deployment)
    assert restarted.mode is Mode.RECOVERY
    with serving(ready, deployment.issuer("coordinator")) as peer:
        recover_from(peer, restarted, deployment.issuer("coordinator"), now=utc_now)
    assert restarted.mode is Mode.READY
    assert restarted.get_manifests() == ready.get_manifests()
    issued = certificate(deployment, restarted, "web")
    assert issued.mesh_ca == ready.get_manifests().mesh_ca
    assert issued.root_ca == ready.get_manifests().root_ca


def test_the_loop_recovers_through_the_first_ready_peer_and_stops_asking(
    deployment: Deployment, ready: Coordinator
) -> None:
    recovering = replica(deployment)  # also in recovery mode: answers FAILED_PRECONDITION
    restarted = replica(deployment)
    issuer = deployment.issuer("coordinator")
    with serving(recovering, issuer) as unready, serving(ready, issuer) as peer:
        loop = PeerRecovery(
            restarted, issuer, PeerSources((unready, "127.0.0.1:9", peer)), now=utc_now
        )
        assert not loop.first_attempt_done.is_set()
        assert loop.attempt()
        assert restarted.mode is Mode.READY
        assert not loop.attempt()  # ready: nothing to do
        assert recovering.mode is Mode.RECOVERY


def test_without_a_ready_peer_the_replica_stays_in_recovery_mode(
    deployment: Deployment, ready: Coordinator
) -> None:
    restarted, other = replica(deployment), replica(deployment)
    issuer = deployment.issuer("coordinator")
    with serving(other, issuer) as unready:
        loop = PeerRecovery(restarted, issuer, PeerSources((unready,)), now=utc_now)
        assert not loop.attempt()
        with pytest.raises(PeerRecoveryFailed, match=r"FAILED_PRECONDITION.*recovery mode"):
            recover_from(unready, restarted, issuer, now=utc_now)
    assert restarted.mode is Mode.RECOVERY
    assert PeerRecovery(restarted, issuer, PeerSources(), now=utc_now).first_attempt_done.is_set()


def test_peers_are_found_under_every_address_of_a_name() -> None:
    assert resolve("localhost:7000") == ["127.0.0.1:7000"]
    assert resolve("127.0.0.1") == ["127.0.0.1:7777"]
    assert resolve("coordinator-peers.invalid") == []
    sources = PeerSources(("10.0.0.1:7777",), "localhost:7777")
    assert sources.targets() == ["10.0.0.1:7777", "127.0.0.1:7777"]


def test_the_requester_refuses_an_answer_not_vouched_for_by_a_coordinator(
    deployment: Deployment, ready: Coordinator
) -> None:
    restarted = replica(deployment)
    # A replica whose TEE runs the web workload's policy: its answer's evidence is refused.
    refused = pytest.raises(PeerRecoveryFailed, match="not a Coordinator of the stored manifest")
    with serving(ready, deployment.issuer("web")) as impostor, refused:
        recover_from(impostor, restarted, deployment.issuer("coordinator"), now=utc_now)
    assert restarted.mode is Mode.RECOVERY


# The answering side: typed refusals, and nothing sealed for the caller. ---------------------


def ask(
    deployment: Deployment, coordinator: Coordinator, name: str
) -> tuple[bytes, bytes, bytes, x25519.X25519PrivateKey]:
    """A nonce, a fresh X25519 key and the evidence of workload `name` binding them."""
    key = x25519.X25519PrivateKey.generate()
    public_key = public_key_der(key.public_key())
    nonce = coordinator.new_nonce()
    evidence = deployment.issuer(name).issue(report_data(public_key, nonce))
    return nonce, public_key, evidence_to_proto(evidence).SerializeToString(), key


def handover_for(deployment: Deployment, coordinator: Coordinator, name: str) -> Handover:
    nonce, public_key, _, _ = ask(deployment, coordinator, name)
    evidence = deployment.issuer(name).issue(report_data(public_key, nonce))
    return coordinator.handover(nonce, public_key, evidence)


def test_a_policy_hash_not_in_the_manifest_is_refused(
    deployment: Deployment, ready: Coordinator
) -> None:
    with pytest.raises(NotACoordinator, match="is not in the active manifest"):
        handover_for(deployment, ready, "rogue")


def test_a_workloads_policy_hash_is_refused(deployment: Deployment, ready: Coordinator) -> None:
    with pytest.raises(NotACoordinator, match="a workload's, not a Coordinator's"):
        handover_for(deployment, ready, "web")


def test_evidence_for_another_key_is_refused(deployment: Deployment, ready: Coordinator) -> None:
    nonce = ready.new_nonce()
    bound = public_key_der(x25519.X25519PrivateKey.generate().public_key())
    substituted = public_key_der(x25519.X25519PrivateKey.generate().public_key())
    evidence = deployment.issuer("coordinator").issue(report_data(bound, nonce))
    with pytest.raises(EvidenceRefused, match="report data"):
        ready.handover(nonce, substituted, evidence)


def test_a_replayed_nonce_is_refused(deployment: Deployment, ready: Coordinator) -> None:
    nonce = ready.new_nonce()
    public_key = public_key_der(x25519.X25519PrivateKey.generate().public_key())
    evidence = deployment.issuer("coordinator").issue(report_data(public_key, nonce))
    assert ready.handover(nonce, public_key, evidence).seed
    with pytest.raises(NonceRefused, match="already used"):
        ready.handover(nonce, public_key, evidence)
    forged = bytes(32)  # never issued
    evidence = deployment.issuer("coordinator").issue(report_data(public_key, forged))
    with pytest.raises(NonceRefused):
        ready.handover(forged, public_key, evidence)


def test_refusals_are_permission_denied_over_the_api_and_carry_no_secret(
    deployment: Deployment, ready: Coordinator
) -> None:
    with serving(ready, deployment.issuer("coordinator")) as peer:
        channel = pinned_channel(peer, fetch_certificate(peer))
        client = MeshApiClient(channel, timeout=20)

        def send(name: str, *, swap_key: bool = False, nonce: bytes | None = None) -> None:
            key = x25519.X25519PrivateKey.generate()
            public_key = public_key_der(key.public_key())
            used = nonce if nonce is not None else client.get_nonce()
            evidence = deployment.issuer(name).issue(report_data(public_key, used))
            if swap_key:
                public_key = public_key_der(x25519.X25519PrivateKey.generate().public_key())
            request = meshapi_pb2.RecoverRequest(
                Nonce=used,
                PublicKey=public_key,
                Evidence=evidence_to_proto(evidence),
                RequesterNonce=bytes(32),
            )
            client.recover(request)

        try:
            replayed = client.get_nonce()
            send("coordinator", nonce=replayed)  # accepted once
            cases = {
                "rogue": ("rogue", False, None, "not in the active manifest"),
                "web": ("web", False, None, "a workload's, not a Coordinator's"),
                "substituted key": ("coordinator", True, None, "report data"),
                "replayed nonce": ("coordinator", False, replayed, "already used"),
            }
            for what, (name, swap_key, nonce, message) in cases.items():
                with pytest.raises(grpc.RpcError) as refused:
                    send(name, swap_key=swap_key, nonce=nonce)
                assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, what
                assert message in refused.value.details(), what
            assert ready.metrics.attestation_failures._value.get() == 3  # type: ignore[attr-defined]
        finally:
            channel.close()


def test_only_x25519_keys_are_sealed_to() -> None:
    with pytest.raises(InvalidRequest, match="X25519"):
        handover.recipient_key(public_key_der(ec.generate_private_key(ec.SECP256R1()).public_key()))
    with pytest.raises(InvalidRequest, match="PKIX DER"):
        handover.recipient_key(b"\x00not a key")


def test_a_sealed_handover_opens_only_with_its_key_for_its_request(
    deployment: Deployment, ready: Coordinator
) -> None:
    secret = handover_for(deployment, ready, "coordinator")
    key = x25519.X25519PrivateKey.generate()
    sealed = handover.seal(secret, key.public_key(), b"nonce")
    assert handover.open_sealed(sealed, key, b"nonce") == secret
    assert secret.seed not in sealed
    with pytest.raises(handover.HandoverUnreadable):
        handover.open_sealed(sealed, x25519.X25519PrivateKey.generate(), b"nonce")
    with pytest.raises(handover.HandoverUnreadable):
        handover.open_sealed(sealed, key, b"other request")
    flipped = bytearray(sealed)
    flipped[-1] ^= 1
    with pytest.raises(handover.HandoverUnreadable):
        handover.open_sealed(bytes(flipped), key, b"nonce")


def test_a_handover_from_another_deployment_is_refused(
    deployment: Deployment, ready: Coordinator, tmp_path: Path
) -> None:
    """A peer of another deployment (its own seed) cannot make this replica serve its state."""
    other = replica(deployment, tmp_path / "other")
    other.set_manifest(deployment.manifest(), deployment.documents())
    restarted = replica(deployment)
    refused = pytest.raises(PermissionDenied, match="does not belong to this Coordinator")
    with serving(other, deployment.issuer("coordinator")) as stranger, refused:
        recover_from(stranger, restarted, deployment.issuer("coordinator"), now=utc_now)
    assert restarted.mode is Mode.RECOVERY
