"""Proof that a manifest update comes from a workload owner.

The update names the transition it follows, so a signature cannot be replayed onto another state:
`t = SHA-256(SHA-256(manifest) ‖ previous transition hash)` and the owner signs the ASCII of
lower-case `hex(t)` with ECDSA-SHA256, as the original's `contrast sign` does. The manifest lists
owners by the SHA-256 of their PKIX DER public key (`WorkloadOwnerKeyDigests`).
"""

from __future__ import annotations

import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.manifest.errors import ManifestError


class OwnershipError(ManifestError):
    """The update is not signed by a workload owner of the active manifest."""


def owner_key_digest(public_key_der: bytes) -> str:
    return hashlib.sha256(public_key_der).hexdigest()


def transition_digest(manifest: bytes, previous_transition_hash: bytes) -> bytes:
    return hashlib.sha256(hashlib.sha256(manifest).digest() + previous_transition_hash).digest()


def sign_update(
    key: ec.EllipticCurvePrivateKey, manifest: bytes, previous_transition_hash: bytes
) -> bytes:
    message = transition_digest(manifest, previous_transition_hash).hex().encode()
    return key.sign(message, ec.ECDSA(hashes.SHA256()))


def verify_update(
    public_key_der: bytes,
    signature: bytes,
    manifest: bytes,
    previous_transition_hash: bytes,
    *,
    allowed_digests: tuple[str, ...],
) -> None:
    """Accept only a signature by a key whose digest is in `allowed_digests`."""
    if not allowed_digests:
        raise OwnershipError("the active manifest allows no updates (it lists no owner keys)")
    if owner_key_digest(public_key_der) not in allowed_digests:
        raise OwnershipError(
            "the update is signed by a key the active manifest does not list as workload owner",
            hint="sign with a key from WorkloadOwnerKeyDigests (--workload-owner-key)",
        )
    try:
        key = serialization.load_der_public_key(public_key_der)
    except ValueError:
        raise OwnershipError("the workload owner public key is not PKIX DER") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise OwnershipError("workload owner keys must be ECDSA keys")
    message = transition_digest(manifest, previous_transition_hash).hex().encode()
    try:
        key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise OwnershipError(
            "the workload owner signature does not verify for this manifest and transition",
            hint="the Coordinator's history moved on: run contrast verify, then set again",
        ) from None
