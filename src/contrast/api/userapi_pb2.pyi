from contrast.api import evidence_pb2 as _evidence_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AttestRequest(_message.Message):
    __slots__ = ("Nonce",)
    NONCE_FIELD_NUMBER: _ClassVar[int]
    Nonce: bytes
    def __init__(self, Nonce: _Optional[bytes] = ...) -> None: ...

class AttestResponse(_message.Message):
    __slots__ = ("Evidence",)
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    Evidence: _evidence_pb2.Evidence
    def __init__(self, Evidence: _Optional[_Union[_evidence_pb2.Evidence, _Mapping]] = ...) -> None: ...

class SetManifestRequest(_message.Message):
    __slots__ = ("Manifest", "Policies", "PreviousTransitionHash", "WorkloadOwnerPublicKey", "Signature")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    PREVIOUSTRANSITIONHASH_FIELD_NUMBER: _ClassVar[int]
    WORKLOADOWNERPUBLICKEY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    Manifest: bytes
    Policies: _containers.RepeatedScalarFieldContainer[bytes]
    PreviousTransitionHash: bytes
    WorkloadOwnerPublicKey: bytes
    Signature: bytes
    def __init__(self, Manifest: _Optional[bytes] = ..., Policies: _Optional[_Iterable[bytes]] = ..., PreviousTransitionHash: _Optional[bytes] = ..., WorkloadOwnerPublicKey: _Optional[bytes] = ..., Signature: _Optional[bytes] = ...) -> None: ...

class SetManifestResponse(_message.Message):
    __slots__ = ("RootCA", "MeshCA", "SeedSharesDoc")
    ROOTCA_FIELD_NUMBER: _ClassVar[int]
    MESHCA_FIELD_NUMBER: _ClassVar[int]
    SEEDSHARESDOC_FIELD_NUMBER: _ClassVar[int]
    RootCA: bytes
    MeshCA: bytes
    SeedSharesDoc: SeedShareDocument
    def __init__(self, RootCA: _Optional[bytes] = ..., MeshCA: _Optional[bytes] = ..., SeedSharesDoc: _Optional[_Union[SeedShareDocument, _Mapping]] = ...) -> None: ...

class SeedShareDocument(_message.Message):
    __slots__ = ("SeedShares", "Salt")
    SEEDSHARES_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    SeedShares: _containers.RepeatedCompositeFieldContainer[SeedShare]
    Salt: bytes
    def __init__(self, SeedShares: _Optional[_Iterable[_Union[SeedShare, _Mapping]]] = ..., Salt: _Optional[bytes] = ...) -> None: ...

class SeedShare(_message.Message):
    __slots__ = ("PublicKey", "EncryptedSeed")
    PUBLICKEY_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTEDSEED_FIELD_NUMBER: _ClassVar[int]
    PublicKey: str
    EncryptedSeed: bytes
    def __init__(self, PublicKey: _Optional[str] = ..., EncryptedSeed: _Optional[bytes] = ...) -> None: ...

class GetManifestsRequest(_message.Message):
    __slots__ = ("Since", "WithoutPolicies")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    WITHOUTPOLICIES_FIELD_NUMBER: _ClassVar[int]
    Since: bytes
    WithoutPolicies: bool
    def __init__(self, Since: _Optional[bytes] = ..., WithoutPolicies: _Optional[bool] = ...) -> None: ...

class GetManifestsResponse(_message.Message):
    __slots__ = ("Manifests", "Policies", "RootCA", "MeshCA", "LatestTransition", "PreviousTransitionHash", "Generation")
    MANIFESTS_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    ROOTCA_FIELD_NUMBER: _ClassVar[int]
    MESHCA_FIELD_NUMBER: _ClassVar[int]
    LATESTTRANSITION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUSTRANSITIONHASH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    Manifests: _containers.RepeatedScalarFieldContainer[bytes]
    Policies: _containers.RepeatedScalarFieldContainer[bytes]
    RootCA: bytes
    MeshCA: bytes
    LatestTransition: SignedTransition
    PreviousTransitionHash: bytes
    Generation: int
    def __init__(self, Manifests: _Optional[_Iterable[bytes]] = ..., Policies: _Optional[_Iterable[bytes]] = ..., RootCA: _Optional[bytes] = ..., MeshCA: _Optional[bytes] = ..., LatestTransition: _Optional[_Union[SignedTransition, _Mapping]] = ..., PreviousTransitionHash: _Optional[bytes] = ..., Generation: _Optional[int] = ...) -> None: ...

class SignedTransition(_message.Message):
    __slots__ = ("TransitionHash", "Signature")
    TRANSITIONHASH_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    TransitionHash: bytes
    Signature: bytes
    def __init__(self, TransitionHash: _Optional[bytes] = ..., Signature: _Optional[bytes] = ...) -> None: ...

class RecoverRequest(_message.Message):
    __slots__ = ("Seed", "Salt", "ExpectedTransitionHash")
    SEED_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    EXPECTEDTRANSITIONHASH_FIELD_NUMBER: _ClassVar[int]
    Seed: bytes
    Salt: bytes
    ExpectedTransitionHash: bytes
    def __init__(self, Seed: _Optional[bytes] = ..., Salt: _Optional[bytes] = ..., ExpectedTransitionHash: _Optional[bytes] = ...) -> None: ...

class RecoverResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
