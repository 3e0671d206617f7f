"""Sealing the handover to a recovering replica's attested key, and opening it there.

The seed leaves a Coordinator only encrypted (invariant 4): to the seed share owners' keys, or,
in peer recovery, to an ephemeral X25519 key that the recovering replica's evidence binds. HPKE
(RFC 9180, base mode) through `cryptography`'s reviewed implementation: a fresh sender key per
answer, AES-256-GCM, and the info string names the exchange (its nonce), so a sealed answer
opens only for the key it was made for and only as the answer to that request.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hpke, serialization
from cryptography.hazmat.primitives.asymmetric import x25519
from google.protobuf.message import DecodeError

from contrast.api import meshapi_pb2
from contrast.coordinator.core import Handover
from contrast.coordinator.errors import CoordinatorPackageError, InvalidRequest

SUITE = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_256_GCM)
INFO = b"contrast peer recovery v1"


class HandoverUnreadable(CoordinatorPackageError):
    """A sealed handover that does not open with our key for our request, or holds no handover."""


def recipient_key(public_key: bytes) -> x25519.X25519PublicKey:
    """The requester's key from its PKIX DER; only X25519 keys receive a handover."""
    try:
        key = serialization.load_der_public_key(public_key)
    except ValueError:
        raise InvalidRequest("the public key is not PKIX DER") from None
    if not isinstance(key, x25519.X25519PublicKey):
        raise InvalidRequest("peer recovery seals to X25519 keys only")
    return key


def seal(handover: Handover, recipient: x25519.X25519PublicKey, nonce: bytes) -> bytes:
    message = meshapi_pb2.Handover(
        Seed=handover.seed,
        Salt=handover.salt,
        MeshCAKey=handover.mesh_ca_key,
        TransitionHash=handover.transition_hash,
    )
    return SUITE.encrypt(message.SerializeToString(), recipient, info=INFO + nonce)


def open_sealed(sealed: bytes, key: x25519.X25519PrivateKey, nonce: bytes) -> Handover:
    try:
        plain = SUITE.decrypt(sealed, key, info=INFO + nonce)
    except (InvalidTag, ValueError):
        raise HandoverUnreadable(
            "the peer's answer does not open with this replica's key for this request"
        ) from None
    message = meshapi_pb2.Handover()
    try:
        message.ParseFromString(plain)
    except DecodeError:
        raise HandoverUnreadable("the peer's sealed answer holds no handover") from None
    return Handover(message.Seed, message.Salt, message.MeshCAKey, message.TransitionHash)
