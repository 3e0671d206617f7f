"""The Coordinator program, driven with random protobuf payloads on every method (issue 11).

Whatever a caller sends, in each of the Coordinator's modes (no manifest, ready, recovery), the
answer is a status chosen on purpose (never UNKNOWN, never INTERNAL: that would be a bug) and the
program's stderr stays one JSON object per line with no error record.

Payloads are raw bytes, and messages built field by field from each request's descriptor (so new
fields are fuzzed too), with bytes drawn from random data and from values that get past the first
checks: a valid manifest and its policies, nonce- and seed-sized strings, a real public key and
real emulated evidence, deeply nested JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contrast.api import meshapi_pb2, services, userapi_pb2
from contrast.api.convert import evidence_to_proto
from contrast.atls.reportdata import public_key_der, report_data
from contrast.attestation.evidence import Evidence
from tests.attestation.dermutations import (
    structural_mutations,
    with_duplicate_extension,
    with_undecodable_name,
    with_version,
)
from tests.coordinator.conftest import Deployment, policy_hash
from tests.coordinator.program import CoordinatorProcess, not_json_objects

# Every answer a caller may get on purpose; INTERNAL and UNKNOWN would be bugs.
DELIBERATE = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.DATA_LOSS,
}
EXAMPLES_PER_METHOD = 120


def interesting_bytes(deployment: Deployment) -> list[bytes]:
    key = public_key_der(ec.generate_private_key(ec.SECP256R1()).public_key())
    evidence = deployment.issuer("web").issue(report_data(key, bytes(32)))
    return [
        deployment.manifest(),
        *deployment.documents(),
        json.dumps({"Policies": "x"}).encode(),
        b"[" * 10_000 + b"]" * 10_000,
        key,
        evidence.report,
        *evidence.endorsements,
        bytes(32),
        bytes(48),
        b"s" * 64,
        b"s" * 8161,
        policy_hash(deployment.policies["web"]),
    ]


def message_of(cls: type[Message], field_bytes: st.SearchStrategy[bytes]) -> st.SearchStrategy[Any]:
    """Messages of `cls` with any subset of fields set, built from its descriptor."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in cls.DESCRIPTOR.fields:
        value: st.SearchStrategy[Any]
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            value = message_of(message_factory.GetMessageClass(field.message_type), field_bytes)
        elif field.type == FieldDescriptor.TYPE_STRING:
            value = st.sampled_from(["snp", "tdx", "SNP", ""]) | st.text(max_size=50)
        elif field.type == FieldDescriptor.TYPE_BOOL:  # GetManifestsRequest.WithoutPolicies
            value = st.booleans()
        else:
            assert field.type == FieldDescriptor.TYPE_BYTES, field.full_name
            value = field_bytes
        fields[field.name] = st.lists(value, max_size=4) if field.is_repeated else value
    return st.fixed_dictionaries({}, optional=fields).map(lambda values: cls(**values))


def payloads(method: services.Method[Any, Any], deployment: Deployment) -> st.SearchStrategy[bytes]:
    field_bytes = st.binary(max_size=128) | st.sampled_from(interesting_bytes(deployment))
    built = message_of(method.request, field_bytes).map(lambda m: m.SerializeToString())
    return st.binary(max_size=512) | built


def fuzz(
    program: CoordinatorProcess, method: services.Method[Any, Any], deployment: Deployment
) -> None:
    @settings(
        max_examples=EXAMPLES_PER_METHOD,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )
    @given(payload=payloads(method, deployment))
    def answers_deliberately(payload: bytes) -> None:
        code = program.call(method, payload)
        assert code in DELIBERATE, f"{method.name} answered {code.name}"

    answers_deliberately()


def fuzz_every_method(program: CoordinatorProcess, deployment: Deployment) -> None:
    for method in services.METHODS:
        fuzz(program, method, deployment)


def assert_log_is_clean(program: CoordinatorProcess) -> None:
    lines = program.stop()
    assert not_json_objects(lines) == []
    levels = {json.loads(line)["level"] for line in lines}
    assert "error" not in levels, [line for line in lines if b'"error"' in line]


@pytest.fixture
def program(tmp_path: Path, deployment: Deployment, tee_dir: Path) -> Iterator[CoordinatorProcess]:
    running = CoordinatorProcess.start(
        tmp_path / "state", tee_dir, policy_hash(deployment.policies["coordinator"])
    )
    yield running
    running.process.kill()


def set_first_manifest(program: CoordinatorProcess, deployment: Deployment) -> None:
    request = userapi_pb2.SetManifestRequest(
        Manifest=deployment.manifest(), Policies=deployment.documents()
    )
    assert program.call(services.SET_MANIFEST, request.SerializeToString()) == grpc.StatusCode.OK


def test_random_payloads_before_a_manifest(
    program: CoordinatorProcess, deployment: Deployment
) -> None:
    fuzz_every_method(program, deployment)
    assert_log_is_clean(program)


def test_random_payloads_when_ready(program: CoordinatorProcess, deployment: Deployment) -> None:
    set_first_manifest(program, deployment)
    fuzz_every_method(program, deployment)
    assert_log_is_clean(program)


def test_random_payloads_in_recovery_mode(
    program: CoordinatorProcess, deployment: Deployment, tmp_path: Path, tee_dir: Path
) -> None:
    set_first_manifest(program, deployment)
    assert_log_is_clean(program)
    restarted = CoordinatorProcess.start(
        tmp_path / "state", tee_dir, policy_hash(deployment.policies["coordinator"])
    )
    try:
        fuzz_every_method(restarted, deployment)
        assert_log_is_clean(restarted)
    finally:
        restarted.process.kill()


@st.composite
def mesh_requests(draw: st.DrawFn, deployment: Deployment) -> tuple[bytes, Evidence]:
    """A public key and evidence for it from the emulated TEE, its VCEK malformed or mutated."""
    key = public_key_der(ec.generate_private_key(ec.SECP256R1()).public_key())
    evidence = deployment.issuer(draw(st.sampled_from(["web", "rogue"]))).issue(
        report_data(key, bytes(32))
    )
    vcek = deployment.tee.vcek.public_bytes(Encoding.DER)
    malformed = st.sampled_from(
        [with_duplicate_extension(vcek), with_version(vcek, 5), with_undecodable_name(vcek)]
    )
    broken = draw(malformed | structural_mutations(vcek))
    endorsements = tuple(broken if e == vcek else e for e in evidence.endorsements)
    return key, replace(evidence, endorsements=endorsements)


def test_mutated_evidence_with_fresh_nonces_when_ready(
    program: CoordinatorProcess, deployment: Deployment
) -> None:
    """Past the nonce check, to the evidence verifier: malformed certificates included."""
    set_first_manifest(program, deployment)

    @settings(
        max_examples=EXAMPLES_PER_METHOD,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )
    @given(request=mesh_requests(deployment))
    def answers_deliberately(request: tuple[bytes, Evidence]) -> None:
        key, evidence = request
        code, response = program.answer(services.GET_NONCE, b"")
        assert code == grpc.StatusCode.OK
        nonce = meshapi_pb2.GetNonceResponse.FromString(response).Nonce
        payload = meshapi_pb2.NewMeshCertRequest(
            Nonce=nonce, PublicKey=key, Evidence=evidence_to_proto(evidence)
        ).SerializeToString()
        # The evidence is bound to another nonce: never a certificate, always a refusal.
        assert program.call(services.NEW_MESH_CERT, payload) == grpc.StatusCode.PERMISSION_DENIED

    answers_deliberately()
    assert_log_is_clean(program)
