"""The SetManifest request as wire bytes, each policy document copied once.

At 10 000 generated workloads the request carries about 545 MB of initdata. Built as a
`SetManifestRequest`, every document is copied into the message, then serialising copies the
whole again into a growing buffer and once more into a Python bytes object: 1.6 s of CPU on this
machine, most of it spent touching fresh memory. The message is five length-delimited fields, so
its encoding is written by hand (`contrast.api.wire.SetManifest.encode`): each field after its
tag and length, joined once. The bytes are exactly `SerializeToString()`'s for the same request
(fields in number order, as protobuf writes them; tests/client/test_setrequest.py compares the
two), so the Coordinator reads the same message as before.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from contrast.api import userapi_pb2
from contrast.api.services import SET_MANIFEST
from contrast.api.wire import SetManifest

# The request and its encoding are shared with the Coordinator, which parses the same wire form.
SetRequest = SetManifest


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
