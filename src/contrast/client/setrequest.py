"""The SetManifest request as wire bytes, each policy document copied once.

At 10 000 generated workloads the request carries about 545 MB of initdata. Built as a
`SetManifestRequest`, every document is copied into the message, then serialising copies the
whole again into a growing buffer and once more into a Python bytes object: 1.6 s of CPU on this
machine, most of it spent touching fresh memory. The message is five length-delimited fields, so
its encoding is written here: the small fields serialised by protobuf itself, each document
after its tag and length, joined once. The bytes are exactly `SerializeToString()`'s for the
same request (fields in number order, as protobuf writes them; tests/client/test_setrequest.py
compares the two), so the Coordinator reads the same message as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from contrast.api import userapi_pb2
from contrast.api.services import SET_MANIFEST

# Field 2 (Policies), wire type 2 (length-delimited): (2 << 3) | 2.
_POLICIES_TAG = b"\x12"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@dataclass(frozen=True)
class SetRequest:
    """A SetManifest request; `encode()` gives its wire bytes."""

    manifest: bytes
    policies: Sequence[bytes]
    previous_transition_hash: bytes = b""
    workload_owner_public_key: bytes = b""
    signature: bytes = b""

    def encode(self) -> bytes:
        head = userapi_pb2.SetManifestRequest(Manifest=self.manifest).SerializeToString()
        tail = userapi_pb2.SetManifestRequest(
            PreviousTransitionHash=self.previous_transition_hash,
            WorkloadOwnerPublicKey=self.workload_owner_public_key,
            Signature=self.signature,
        ).SerializeToString()
        parts = [head]
        for policy in self.policies:
            parts += (_POLICIES_TAG + _varint(len(policy)), policy)
        parts.append(tail)
        return b"".join(parts)


def set_manifest(
    channel: grpc.Channel, request: SetRequest, *, timeout: float
) -> userapi_pb2.SetManifestResponse:
    """Send `request` (as `UserApiClient.set_manifest` would send its message) and return the
    Coordinator's answer; a refusal is the `grpc.RpcError`, as there."""
    call: Callable[..., userapi_pb2.SetManifestResponse] = channel.unary_unary(
        SET_MANIFEST.path,  # no serializer: the request is already its bytes
        response_deserializer=SET_MANIFEST.response.FromString,
    )
    return call(request.encode(), timeout=timeout)
