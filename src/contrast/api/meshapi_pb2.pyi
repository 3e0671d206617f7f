from contrast.api import evidence_pb2 as _evidence_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetNonceRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetNonceResponse(_message.Message):
    __slots__ = ("Nonce",)
    NONCE_FIELD_NUMBER: _ClassVar[int]
    Nonce: bytes
    def __init__(self, Nonce: _Optional[bytes] = ...) -> None: ...

class NewMeshCertRequest(_message.Message):
    __slots__ = ("Nonce", "PublicKey", "Evidence")
    NONCE_FIELD_NUMBER: _ClassVar[int]
    PUBLICKEY_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    Nonce: bytes
    PublicKey: bytes
    Evidence: _evidence_pb2.Evidence
    def __init__(self, Nonce: _Optional[bytes] = ..., PublicKey: _Optional[bytes] = ..., Evidence: _Optional[_Union[_evidence_pb2.Evidence, _Mapping]] = ...) -> None: ...

class NewMeshCertResponse(_message.Message):
    __slots__ = ("MeshCACert", "CertChain", "RootCACert", "WorkloadSecret")
    MESHCACERT_FIELD_NUMBER: _ClassVar[int]
    CERTCHAIN_FIELD_NUMBER: _ClassVar[int]
    ROOTCACERT_FIELD_NUMBER: _ClassVar[int]
    WORKLOADSECRET_FIELD_NUMBER: _ClassVar[int]
    MeshCACert: bytes
    CertChain: bytes
    RootCACert: bytes
    WorkloadSecret: bytes
    def __init__(self, MeshCACert: _Optional[bytes] = ..., CertChain: _Optional[bytes] = ..., RootCACert: _Optional[bytes] = ..., WorkloadSecret: _Optional[bytes] = ...) -> None: ...
