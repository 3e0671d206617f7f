"""Typed gRPC bindings of the UserAPI and MeshAPI.

protoc's gRPC plugin emits untyped stubs; the two services are small enough to bind by hand over
grpc's generic API, so callers and servicers are checked by mypy like the rest of the code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from contrast.api import meshapi_pb2, userapi_pb2
from contrast.api.wire import ManifestsResponse, SetManifest

Request = TypeVar("Request", bound=Message)
Response = TypeVar("Response", bound=Message)

USER_API = "contrast.userapi.UserAPI"
MESH_API = "contrast.meshapi.MeshAPI"
# The largest UserAPI message either end accepts (gRPC's default is 4 MiB). SetManifest and
# GetManifests carry a manifest with all its policy documents: 10 000 workloads are about 5 MB
# with 300-byte documents and about 540 MB with generated ones (about 54 KB of initdata each).
USER_API_MESSAGE_LIMIT = 1 << 30
USER_API_MESSAGE_OPTIONS = (
    ("grpc.max_receive_message_length", USER_API_MESSAGE_LIMIT),
    ("grpc.max_send_message_length", USER_API_MESSAGE_LIMIT),
)


@dataclass(frozen=True)
class Method(Generic[Request, Response]):
    service: str
    name: str
    request: type[Request]
    response: type[Response]

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.name}"

    def client(self, channel: grpc.Channel) -> Callable[..., Response]:
        call: Callable[..., Response] = channel.unary_unary(
            self.path,
            request_serializer=self.request.SerializeToString,
            response_deserializer=self.response.FromString,
        )
        return call

    def handler(
        self, implementation: Callable[[Request, grpc.ServicerContext], Response]
    ) -> grpc.RpcMethodHandler[Request, Response]:
        return grpc.unary_unary_rpc_method_handler(
            implementation,
            request_deserializer=self.request.FromString,
            response_serializer=self.response.SerializeToString,
        )


ATTEST = Method(USER_API, "Attest", userapi_pb2.AttestRequest, userapi_pb2.AttestResponse)
SET_MANIFEST = Method(
    USER_API, "SetManifest", userapi_pb2.SetManifestRequest, userapi_pb2.SetManifestResponse
)
GET_MANIFESTS = Method(
    USER_API, "GetManifests", userapi_pb2.GetManifestsRequest, userapi_pb2.GetManifestsResponse
)
RECOVER = Method(USER_API, "Recover", userapi_pb2.RecoverRequest, userapi_pb2.RecoverResponse)
GET_NONCE = Method(MESH_API, "GetNonce", meshapi_pb2.GetNonceRequest, meshapi_pb2.GetNonceResponse)
NEW_MESH_CERT = Method(
    MESH_API, "NewMeshCert", meshapi_pb2.NewMeshCertRequest, meshapi_pb2.NewMeshCertResponse
)
PEER_RECOVER = Method(MESH_API, "Recover", meshapi_pb2.RecoverRequest, meshapi_pb2.RecoverResponse)

# Every method of both services, for whatever must cover them all (tests, metrics).
METHODS = (ATTEST, SET_MANIFEST, GET_MANIFESTS, RECOVER, GET_NONCE, NEW_MESH_CERT, PEER_RECOVER)


class UserApiServicer(Protocol):
    def attest(
        self, request: userapi_pb2.AttestRequest, context: grpc.ServicerContext
    ) -> userapi_pb2.AttestResponse: ...

    def set_manifest(
        self, request: SetManifest, context: grpc.ServicerContext
    ) -> userapi_pb2.SetManifestResponse: ...

    def get_manifests(
        self, request: userapi_pb2.GetManifestsRequest, context: grpc.ServicerContext
    ) -> ManifestsResponse: ...

    def recover(
        self, request: userapi_pb2.RecoverRequest, context: grpc.ServicerContext
    ) -> userapi_pb2.RecoverResponse: ...


class MeshApiServicer(Protocol):
    def get_nonce(
        self, request: meshapi_pb2.GetNonceRequest, context: grpc.ServicerContext
    ) -> meshapi_pb2.GetNonceResponse: ...

    def new_mesh_cert(
        self, request: meshapi_pb2.NewMeshCertRequest, context: grpc.ServicerContext
    ) -> meshapi_pb2.NewMeshCertResponse: ...

    def recover(
        self, request: meshapi_pb2.RecoverRequest, context: grpc.ServicerContext
    ) -> meshapi_pb2.RecoverResponse: ...


def user_api_handler(servicer: UserApiServicer) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        USER_API,
        {
            ATTEST.name: ATTEST.handler(servicer.attest),
            # Read by hand from its bytes (contrast.api.wire): upb's parse and the copy out of
            # the message cost twice what one pass does at ~545 MB of documents.
            SET_MANIFEST.name: grpc.unary_unary_rpc_method_handler(
                servicer.set_manifest,
                request_deserializer=SetManifest.parse,
                response_serializer=SET_MANIFEST.response.SerializeToString,
            ),
            # Written by hand likewise: the answer carries every document back (~568 MB).
            GET_MANIFESTS.name: grpc.unary_unary_rpc_method_handler(
                servicer.get_manifests,
                request_deserializer=GET_MANIFESTS.request.FromString,
                response_serializer=ManifestsResponse.encode,
            ),
            RECOVER.name: RECOVER.handler(servicer.recover),
        },
    )


def mesh_api_handler(servicer: MeshApiServicer) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        MESH_API,
        {
            GET_NONCE.name: GET_NONCE.handler(servicer.get_nonce),
            NEW_MESH_CERT.name: NEW_MESH_CERT.handler(servicer.new_mesh_cert),
            PEER_RECOVER.name: PEER_RECOVER.handler(servicer.recover),
        },
    )


class UserApiClient:
    """Calls of the UserAPI over one channel, each with the same deadline."""

    def __init__(self, channel: grpc.Channel, *, timeout: float = 30.0) -> None:
        self._attest = ATTEST.client(channel)
        self._set_manifest = SET_MANIFEST.client(channel)
        self._get_manifests = GET_MANIFESTS.client(channel)
        self._recover = RECOVER.client(channel)
        self.timeout = timeout

    def attest(self, request: userapi_pb2.AttestRequest) -> userapi_pb2.AttestResponse:
        return self._attest(request, timeout=self.timeout)

    def set_manifest(
        self, request: userapi_pb2.SetManifestRequest
    ) -> userapi_pb2.SetManifestResponse:
        return self._set_manifest(request, timeout=self.timeout)

    def get_manifests(
        self, *, since: bytes = b"", without_policies: bool = False
    ) -> userapi_pb2.GetManifestsResponse:
        """The history; with `since`, from the manifests after that transition, and with
        `without_policies`, no policy documents (see the proto)."""
        request = userapi_pb2.GetManifestsRequest(Since=since, WithoutPolicies=without_policies)
        return self._get_manifests(request, timeout=self.timeout)

    def recover(self, request: userapi_pb2.RecoverRequest) -> userapi_pb2.RecoverResponse:
        return self._recover(request, timeout=self.timeout)


class MeshApiClient:
    """Calls of the MeshAPI over one channel."""

    def __init__(self, channel: grpc.Channel, *, timeout: float = 30.0) -> None:
        self._get_nonce = GET_NONCE.client(channel)
        self._new_mesh_cert = NEW_MESH_CERT.client(channel)
        self._recover = PEER_RECOVER.client(channel)
        self.timeout = timeout

    def get_nonce(self) -> bytes:
        response = self._get_nonce(meshapi_pb2.GetNonceRequest(), timeout=self.timeout)
        return response.Nonce

    def new_mesh_cert(
        self, request: meshapi_pb2.NewMeshCertRequest
    ) -> meshapi_pb2.NewMeshCertResponse:
        return self._new_mesh_cert(request, timeout=self.timeout)

    def recover(self, request: meshapi_pb2.RecoverRequest) -> meshapi_pb2.RecoverResponse:
        return self._recover(request, timeout=self.timeout)
