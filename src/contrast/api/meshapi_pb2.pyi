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

class RecoverRequest(_message.Message):
    __slots__ = ("Nonce", "PublicKey", "Evidence", "RequesterNonce")
    NONCE_FIELD_NUMBER: _ClassVar[int]
    PUBLICKEY_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    REQUESTERNONCE_FIELD_NUMBER: _ClassVar[int]
    Nonce: bytes
    PublicKey: bytes
    Evidence: _evidence_pb2.Evidence
    RequesterNonce: bytes
    def __init__(self, Nonce: _Optional[bytes] = ..., PublicKey: _Optional[bytes] = ..., Evidence: _Optional[_Union[_evidence_pb2.Evidence, _Mapping]] = ..., RequesterNonce: _Optional[bytes] = ...) -> None: ...

class RecoverResponse(_message.Message):
    __slots__ = ("Sealed", "Evidence")
    SEALED_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    Sealed: bytes
    Evidence: _evidence_pb2.Evidence
    def __init__(self, Sealed: _Optional[bytes] = ..., Evidence: _Optional[_Union[_evidence_pb2.Evidence, _Mapping]] = ...) -> None: ...

class Handover(_message.Message):
    __slots__ = ("Seed", "Salt", "MeshCAKey", "TransitionHash")
    SEED_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    MESHCAKEY_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONHASH_FIELD_NUMBER: _ClassVar[int]
    Seed: bytes
    Salt: bytes
    MeshCAKey: bytes
    TransitionHash: bytes
    def __init__(self, Seed: _Optional[bytes] = ..., Salt: _Optional[bytes] = ..., MeshCAKey: _Optional[bytes] = ..., TransitionHash: _Optional[bytes] = ...) -> None: ...
