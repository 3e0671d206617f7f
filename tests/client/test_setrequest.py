"""The SetManifest request `set` writes as wire bytes is protobuf's own serialisation of it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.api import userapi_pb2
from contrast.api.wire import varint as _varint
from contrast.client.setrequest import SetRequest


def _protobuf(request: SetRequest) -> bytes:
    return userapi_pb2.SetManifestRequest(
        Manifest=request.manifest,
        Policies=list(request.policies),
        PreviousTransitionHash=request.previous_transition_hash,
        WorkloadOwnerPublicKey=request.workload_owner_public_key,
        Signature=request.signature,
    ).SerializeToString()


@given(
    manifest=st.binary(max_size=300),
    policies=st.lists(st.binary(max_size=300), max_size=6),
    previous=st.binary(max_size=40),
    key=st.binary(max_size=100),
    signature=st.binary(max_size=80),
)
@settings(max_examples=300)
def test_the_bytes_are_protobufs_for_any_request(
    manifest: bytes, policies: list[bytes], previous: bytes, key: bytes, signature: bytes
) -> None:
    request = SetRequest(manifest, policies, previous, key, signature)
    assert request.encode() == _protobuf(request)


def test_lengths_across_every_varint_width_and_empty_documents() -> None:
    # 0 and 1 byte, the edges of a one-, two- and three-byte length, and a generated policy's size.
    sizes = [0, 1, 127, 128, 16383, 16384, 2_097_151, 2_097_152, 54_295]
    policies = [bytes([index]) * size for index, size in enumerate(sizes)]
    request = SetRequest(b"{}", policies, b"\0" * 32, b"k" * 91, b"s" * 71)
    encoded = request.encode()
    assert encoded == _protobuf(request)
    parsed = userapi_pb2.SetManifestRequest.FromString(encoded)
    assert list(parsed.Policies) == policies
    assert parsed.Manifest == b"{}"


def test_a_first_manifest_without_key_and_signature() -> None:
    request = SetRequest(b'{"Policies":{}}', [b"a", b"b"], previous_transition_hash=b"\0" * 32)
    parsed = userapi_pb2.SetManifestRequest.FromString(request.encode())
    assert not parsed.WorkloadOwnerPublicKey
    assert not parsed.Signature
    assert request.encode() == _protobuf(request)


def _decoded(varint: bytes) -> int:
    value = 0
    for shift, byte in enumerate(varint):
        value |= (byte & 0x7F) << (7 * shift)
    return value


def test_varint_is_protobufs_length_prefix() -> None:
    for value in (0, 1, 127, 128, 300, 16383, 16384, 2**21 - 1, 2**21):
        # A repeated field is written even when empty: tag, length, bytes.
        field = userapi_pb2.SetManifestRequest(Policies=[b"x" * value]).SerializeToString()
        assert field == b"\x12" + _varint(value) + b"x" * value
    for value in (2**28, 2**35, 2**63):  # beyond any message: the encoding alone
        encoded = _varint(value)
        assert _decoded(encoded) == value
        assert encoded[-1] < 0x80
        assert all(byte >= 0x80 for byte in encoded[:-1])
