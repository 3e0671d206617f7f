"""The hand-written SetManifestRequest parser reads what upb reads and refuses what upb refuses.

Every case is decided by upb itself (`SetManifestRequest.FromString`): generated encodings with
unknown fields of every wire type (groups nested in groups, which the parser hands to upb),
known fields under another wire type, singular fields given more than once and empty ones, then
each of them cut at every length and mutated byte by byte. Through gRPC, a real Coordinator
takes a request read this way and answers bytes that are not one with INVALID_ARGUMENT, naming
the message as before.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.api import services, userapi_pb2, wire
from contrast.api.wire import MalformedMessage, ManifestsResponse, SetManifest
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.client.setrequest import set_manifest
from tests.coordinator.conftest import Deployment, policy
from tests.coordinator.test_status import Running, captured_log, start

Fields = tuple[bytes, list[bytes], bytes, bytes, bytes]


def upb(data: bytes) -> Fields | None:
    try:
        message = userapi_pb2.SetManifestRequest.FromString(data)
    except Exception:  # whatever upb raises, it refused the bytes
        return None
    return (
        message.Manifest,
        list(message.Policies),
        message.PreviousTransitionHash,
        message.WorkloadOwnerPublicKey,
        message.Signature,
    )


def hand(data: bytes) -> Fields | None:
    try:
        request = SetManifest.parse(data)
    except MalformedMessage:
        return None
    assert all(type(document) is bytes for document in request.policies)
    return (
        request.manifest,
        list(request.policies),
        request.previous_transition_hash,
        request.workload_owner_public_key,
        request.signature,
    )


def agree(data: bytes) -> bool:
    """Whether upb accepted `data` (the hand parser must give the same fields, or refuse too)."""
    expected = upb(data)
    assert hand(data) == expected, data[:200].hex()
    return expected is not None


def test_field_numbers_are_the_protos() -> None:
    fields = userapi_pb2.SetManifestRequest.DESCRIPTOR.fields_by_name
    assert {name: field.number for name, field in fields.items()} == {
        "Manifest": SetManifest.MANIFEST,
        "Policies": SetManifest.POLICIES,
        "PreviousTransitionHash": SetManifest.PREVIOUS_TRANSITION_HASH,
        "WorkloadOwnerPublicKey": SetManifest.WORKLOAD_OWNER_PUBLIC_KEY,
        "Signature": SetManifest.SIGNATURE,
    }
    assert all(field.type == field.TYPE_BYTES for field in fields.values())


def test_the_response_field_numbers_are_the_protos() -> None:
    fields = userapi_pb2.GetManifestsResponse.DESCRIPTOR.fields_by_name
    assert {name: field.number for name, field in fields.items()} == {
        "Manifests": ManifestsResponse.MANIFESTS,
        "Policies": ManifestsResponse.POLICIES,
        "RootCA": ManifestsResponse.ROOT_CA,
        "MeshCA": ManifestsResponse.MESH_CA,
        "LatestTransition": ManifestsResponse.LATEST_TRANSITION,
        "PreviousTransitionHash": ManifestsResponse.PREVIOUS_TRANSITION_HASH,
        "Generation": ManifestsResponse.GENERATION,
    }
    signed = userapi_pb2.SignedTransition.DESCRIPTOR.fields_by_name
    assert (signed["TransitionHash"].number, signed["Signature"].number) == (1, 2)


def _protobuf_response(response: ManifestsResponse) -> bytes:
    return userapi_pb2.GetManifestsResponse(
        Manifests=response.manifests,
        Policies=response.policies,
        RootCA=response.root_ca,
        MeshCA=response.mesh_ca,
        LatestTransition=userapi_pb2.SignedTransition(
            TransitionHash=response.transition_hash, Signature=response.signature
        ),
        PreviousTransitionHash=response.previous_transition_hash,
        Generation=response.generation,
    ).SerializeToString()


@given(
    response=st.builds(
        ManifestsResponse,
        manifests=st.lists(st.binary(max_size=200), max_size=4),
        policies=st.lists(st.binary(max_size=200), max_size=6),
        root_ca=st.binary(max_size=40),
        mesh_ca=st.binary(max_size=40),
        transition_hash=st.binary(max_size=40),
        signature=st.binary(max_size=140),
        previous_transition_hash=st.binary(max_size=40),
        generation=st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1)),
    )
)
@settings(max_examples=400)
def test_the_response_bytes_are_protobufs(response: ManifestsResponse) -> None:
    encoded = response.encode()
    assert encoded == _protobuf_response(response)
    parsed = userapi_pb2.GetManifestsResponse.FromString(encoded)
    assert list(parsed.Policies) == list(response.policies)
    assert parsed.Generation == response.generation


def test_a_response_of_generated_size_documents_is_protobufs() -> None:
    documents = [bytes([index % 251]) * size for index, size in enumerate((0, 127, 128, 54_295))]
    response = ManifestsResponse(
        [b"{}" * 70_000], documents * 30, b"r" * 600, b"m" * 600, b"h" * 32, b"s" * 103, b"", 1
    )
    assert response.encode() == _protobuf_response(response)


def _padded_varint(value: int, padding: int) -> bytes:
    """`value` as a varint with `padding` extra (redundant) bytes, as protobuf accepts."""
    encoded = bytearray(wire.varint(value))
    if padding:
        encoded[-1] |= 0x80
        encoded += b"\x80" * (padding - 1) + b"\x00"
    return bytes(encoded)


field_numbers = st.one_of(
    st.integers(1, 5), st.integers(6, 40), st.sampled_from([2**29 - 1, 2**28, 19000])
)


@st.composite
def unknown_field(draw: st.DrawFn, depth: int = 0) -> bytes:
    """Any field protobuf skips: an unknown number, or a known one under another wire type."""
    number = draw(field_numbers)
    wire_type = draw(st.sampled_from([0, 1, 2, 3, 5] if depth < 3 else [0, 1, 2, 5]))
    if number <= 5 and wire_type == 2:
        wire_type = 0
    key = number << 3 | wire_type
    # A tag may take up to 5 bytes: padded only where that stays within them.
    head = _padded_varint(key, draw(st.integers(0, 1)) if key < 1 << 28 else 0)
    if wire_type == 0:
        value = draw(st.integers(0, 2**64 - 1))
        return head + _padded_varint(value, draw(st.integers(0, 1)) if value < 1 << 63 else 0)
    if wire_type == 1:
        return head + draw(st.binary(min_size=8, max_size=8))
    if wire_type == 5:
        return head + draw(st.binary(min_size=4, max_size=4))
    if wire_type == 2:
        value = draw(st.binary(max_size=20))
        return head + _padded_varint(len(value), draw(st.integers(0, 2))) + value
    inner = draw(st.lists(unknown_field(depth + 1), max_size=3))
    return head + b"".join(inner) + wire.tag(number, 4)


known_field = st.builds(
    lambda number, value, padding: (
        _padded_varint(number << 3 | 2, 0) + _padded_varint(len(value), padding) + value
    ),
    st.integers(1, 5),
    st.binary(max_size=30),
    st.integers(0, 3),
)
encodings = st.lists(st.one_of(known_field, unknown_field()), max_size=12).map(b"".join)


@given(data=encodings)
@settings(max_examples=600)
def test_the_fields_are_upbs_for_generated_messages(data: bytes) -> None:
    assert agree(data)


@given(data=encodings, seed=st.integers(0, 2**32 - 1))
@settings(max_examples=300)
def test_every_cut_and_mutation_is_refused_where_upb_refuses_it(data: bytes, seed: int) -> None:
    for length in range(len(data)):
        agree(data[:length])
    rng = random.Random(seed)
    for _ in range(30):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            position = rng.randint(0, len(mutated))
            choice = rng.randint(0, 3)
            if choice == 0 and mutated:
                mutated[min(position, len(mutated) - 1)] = rng.randint(0, 255)
            elif choice == 1:  # a tag or continuation byte where it does not belong
                mutated[position:position] = bytes([rng.choice([0x0B, 0x0C, 0x0E, 0x80, 0xFF, 7])])
            elif choice == 2 and mutated:
                del mutated[min(position, len(mutated) - 1)]
            else:
                mutated[position:position] = rng.randbytes(rng.randint(1, 3))
        agree(bytes(mutated))


@pytest.mark.parametrize(
    ("data", "accepted"),
    [
        (b"", True),
        (b"\x0a\x01a\x0a\x01b", True),  # the last Manifest counts
        (b"\x12\x00\x12\x00", True),  # two empty documents
        (b"\x08\x05\x0d\x01\x02\x03\x04\x0b\x0c", True),  # known numbers, other wire types
        (b"\x30" + b"\xff" * 9 + b"\x7f", True),  # 10 bytes, bits past 64 dropped
        (b"\x30" + b"\xff" * 10 + b"\x01", False),  # 11 bytes
        (b"\x8a\x80\x80\x80\x00\x01a", True),  # a 5-byte tag
        (b"\x8a\x80\x80\x80\x80\x00\x01a", False),  # a 6-byte tag
        (b"\xfa\xff\xff\xff\x0f\x00", True),  # field number 2^29 - 1
        (b"\x8a\x80\x80\x80\x10\x01a", False),  # a tag of 2^32 or more
        (b"\x0a\x81\x80\x80\x80\x00a", True),  # a 5-byte length
        (b"\x0a\x81\x80\x80\x80\x80\x00a", False),  # a 6-byte length
        (b"\x0a\x02a", False),  # a length past the end
        (b"\x02\x00", False),  # field number 0
        (b"\x0e", False),  # wire type 6
        (b"\x0f", False),  # wire type 7
        (b"\x0c", False),  # an end-group alone
        (b"\x0b", False),  # a group not closed
        (b"\x33\x3b\x34\x3c", False),  # closed by the outer group's end
        (b"\x31\x01", False),  # fixed64 cut short
        (b"\x35\x01\x02\x03", False),  # fixed32 cut short
        (b"\x0b\x00\x0b\x0c", True),  # field number 0 inside a group: upb skips it
        (b"\x33\x03\x04\x34", True),  # a group of number 0 inside one
        (b"\x33\x00\x34", False),  # a varint of number 0 eats the end-group
        (b"\x33\x04\x34", False),  # an end-group of number 0 inside group 6
        (b"\x33" * 100 + b"\x34" * 100, True),  # protobuf's recursion limit
        (b"\x33" * 101 + b"\x34" * 101, False),
    ],
)
def test_the_edges_of_the_wire_format(data: bytes, accepted: bool) -> None:
    assert agree(data) is accepted


def test_a_generated_size_request_reads_as_upb_reads_it() -> None:
    documents = [bytes([index % 251]) * size for index, size in enumerate((0, 1, 127, 128, 54_295))]
    request = SetManifest(b"{}", documents * 20, b"\0" * 32, b"k" * 91, b"s" * 71)
    encoded = request.encode()
    assert (
        encoded
        == userapi_pb2.SetManifestRequest(
            Manifest=b"{}",
            Policies=documents * 20,
            PreviousTransitionHash=b"\0" * 32,
            WorkloadOwnerPublicKey=b"k" * 91,
            Signature=b"s" * 71,
        ).SerializeToString()
    )
    assert SetManifest.parse(encoded) == SetManifest(
        b"{}", documents * 20, b"\0" * 32, b"k" * 91, b"s" * 71
    )
    assert agree(encoded)


def test_groups_and_messages_of_too_many_fields_are_left_to_upb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handed: list[bytes] = []
    by_upb = SetManifest.parse_with_upb

    def spy(data: bytes) -> SetManifest:
        handed.append(data)
        return by_upb(data)

    monkeypatch.setattr(SetManifest, "parse_with_upb", spy)
    many = b"\x38\x00" * (wire.FIELD_BUDGET - 1) + b"\x0a\x01m"
    assert agree(many)
    assert handed == []  # the budget's worth of fields is read here
    assert agree(many + b"\x12\x01p")
    assert handed == [many + b"\x12\x01p"]
    handed.clear()
    assert agree(b"\x0a\x01m\x33\x34")
    assert not agree(b"\x0a\x01m\x33")
    assert handed == [b"\x0a\x01m\x33\x34", b"\x0a\x01m\x33"]


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Deployment, Running]]:
    deployment = Deployment(
        tee=EmulatedSnp(tmp_path / "tee"),
        owner=ec.generate_private_key(ec.SECP384R1()),
        seedshare=rsa.generate_private_key(65537, 2048),
        policies={name: policy(name) for name in ("coordinator", "web")},
        state_dir=tmp_path / "state",
    )
    with captured_log(json_lines=True) as log:
        served = start(deployment, deployment.coordinator(), log)
        try:
            yield deployment, served
        finally:
            served.close()


def test_the_clients_set_manifest_is_read(running: tuple[Deployment, Running]) -> None:
    deployment, served = running
    request = SetManifest(deployment.manifest(), deployment.documents(), b"\0" * 32)
    assert set_manifest(served.user, request, timeout=30).MeshCA
    history = services.UserApiClient(served.user).get_manifests()
    assert list(history.Policies) == deployment.documents()


def test_a_set_manifest_through_grpc_is_read_by_hand(
    running: tuple[Deployment, Running],
) -> None:
    deployment, served = running
    # Unknown fields and a Manifest given twice: the Coordinator reads the last one.
    request = SetManifest(b"not this one", deployment.documents())
    encoded = request.encode() + b"\x38\x07\x0a" + _encoded_length(deployment.manifest())
    response = served.user.unary_unary(services.SET_MANIFEST.path)(encoded, timeout=30)
    assert userapi_pb2.SetManifestResponse.FromString(response).RootCA
    history = services.UserApiClient(served.user).get_manifests()
    assert list(history.Manifests) == [deployment.manifest()]
    assert list(history.Policies) == deployment.documents()


def _encoded_length(value: bytes) -> bytes:
    return wire.varint(len(value)) + value


@pytest.mark.parametrize(
    "cut",
    [
        lambda data: data[:-1],  # a length past the end
        lambda data: data + b"\x0c",  # an end-group alone
        lambda data: data + b"\x80",  # a varint cut short
        lambda data: data + b"\x0e",  # wire type 6
    ],
)
def test_a_malformed_request_is_invalid_argument(
    running: tuple[Deployment, Running], cut: Callable[[bytes], bytes]
) -> None:
    deployment, served = running
    encoded = SetManifest(deployment.manifest(), deployment.documents()).encode()
    assert upb(cut(encoded)) is None
    with pytest.raises(grpc.RpcError) as refused:
        served.user.unary_unary(services.SET_MANIFEST.path)(cut(encoded), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == (
        "the request is not a contrast.userapi.SetManifestRequest message"
    )
    with pytest.raises(grpc.RpcError) as nothing_set:
        services.UserApiClient(served.user).get_manifests()
    assert nothing_set.value.code() == grpc.StatusCode.FAILED_PRECONDITION
