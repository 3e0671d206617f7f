"""A manifest of 10 000 policies through the real gRPC client and server (issue 29).

gRPC refuses a message over 4 MiB by default, on both ends; the SetManifest of 10 000 policies
(a 1.9 MB manifest and 3 MB of 300-byte documents) is above that, and so is the GetManifests
that sends them back. Both ends of the user API allow `USER_API_MESSAGE_LIMIT` instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.api import userapi_pb2
from contrast.api.services import USER_API_MESSAGE_LIMIT, UserApiClient
from contrast.atls.client import AttestedConnection, connect_attested
from contrast.atls.identity import TlsIdentity
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.coordinator.core import utc_now
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.history.history import digest
from contrast.manifest.model import Manifest
from contrast.manifest.verifier import coordinator_verifier
from tests.coordinator.conftest import Deployment, policy, policy_hash
from tests.coordinator.crash_step_worker import LARGE, large_policy

GRPC_DEFAULT_LIMIT = 4 << 20
NAMES = ("coordinator", "web", *LARGE)


@pytest.fixture
def deployment(tmp_path: Path) -> Deployment:
    policies = {name: policy(name) for name in ("coordinator", "web")}
    return Deployment(
        tee=EmulatedSnp(tmp_path / "tee"),
        owner=ec.generate_private_key(ec.SECP384R1()),
        seedshare=rsa.generate_private_key(65537, 2048),
        policies=policies | {name: large_policy(name) for name in LARGE},
        state_dir=tmp_path / "state",
    )


@pytest.fixture
def connection(deployment: Deployment) -> Iterator[AttestedConnection]:
    server = CoordinatorServer(
        deployment.coordinator(),
        deployment.issuer("coordinator"),
        TlsIdentity.generate(now=utc_now()),
        host="127.0.0.1",
        ports=Ports(0, 0, 0),
    )
    server.start()
    manifest = Manifest.from_bytes(deployment.manifest(NAMES))
    verifier = coordinator_verifier(manifest, [policy_hash(deployment.policies["coordinator"])])
    attested = connect_attested(
        f"127.0.0.1:{server.ports.user_api}", verifier, now=datetime.now(UTC)
    )
    yield attested
    attested.close()
    server.stop(grace=0)


def test_a_manifest_of_10000_policies_is_set_and_fetched_back_whole(
    deployment: Deployment, connection: AttestedConnection
) -> None:
    assert len(NAMES) >= 10_000
    client = UserApiClient(connection.channel, timeout=300)
    manifest, documents = deployment.manifest(NAMES), deployment.documents(NAMES)
    request = userapi_pb2.SetManifestRequest(Manifest=manifest, Policies=documents)
    assert GRPC_DEFAULT_LIMIT < request.ByteSize() < USER_API_MESSAGE_LIMIT

    client.set_manifest(request)
    history = client.get_manifests()

    assert history.ByteSize() > GRPC_DEFAULT_LIMIT
    assert list(history.Manifests) == [manifest]
    assert sorted(history.Policies, key=digest) == sorted(documents, key=digest)

    # WithoutPolicies (what `set` asks): the same answer less the documents, 3 MB smaller here
    # (545 MB at 10 000 real-size 54 KB initdata documents).
    bare = client.get_manifests(without_policies=True)
    assert not bare.Policies
    full = userapi_pb2.GetManifestsResponse()
    full.CopyFrom(history)
    del full.Policies[:]
    assert bare == full
    assert history.ByteSize() - bare.ByteSize() >= sum(len(d) for d in documents)
    print(f"GetManifests answer: {history.ByteSize()} bytes, without policies {bare.ByteSize()}")
