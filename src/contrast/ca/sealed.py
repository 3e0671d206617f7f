"""A state's CA sealed for the history: every replica and every restart serves the same mesh CA.

The original keeps the mesh CA key only in memory: a restart makes a new one, and a replica that
follows another's manifest needs that replica alive to hand the key over. Here the CA of each
state is stored beside its transition, sealed with AES-256-GCM under a seed-derived key
(`SeedEngine.authority_sealing_key`), the transition hash as associated data, so an entry cannot
be moved to another state; only a holder of the seed can open it, and any change is detected.

Each seed seals into a slot of its own (`sealer_id`, named beside the transition hash in the
history): two seeds can reach the same transition, since the first manifest's transition hash is
the manifest's alone. A first SetManifest killed after its CA was sealed leaves one for a seed
that died with the process; the retry's new seed, or the loser of two replicas racing on the same
first manifest, must not find that one in its place (it would not open: the state would be taken
for damaged). An entry in another seed's slot is never read, so no one without the seed can put a
CA where a Coordinator takes it from: a slot holds only what opens with its seed's key.

Layout: `0x01 ‖ 12-byte nonce ‖ AES-GCM(mesh key PKCS#8 PEM ‖ root ‖ intermediate ‖ mesh CA PEM)`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from cryptography import x509
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from contrast.ca.authority import CertificateAuthority
from contrast.ca.errors import SealedAuthorityDamaged

FORMAT = b"\x01"
NONCE_SIZE = 12
_ASSOCIATED_PREFIX = b"contrast sealed authority\x00"
_SEALER_LABEL = b"contrast sealed authority sealer"
SEALER_ID_SIZE = 16


def sealer_id(key: bytes) -> bytes:
    """The public name of the seed whose sealing `key` seals a CA: the slot it seals into.

    An HMAC of a fixed label under the key: it tells seeds apart and reveals nothing of the key.
    """
    return hmac.new(key, _SEALER_LABEL, hashlib.sha256).digest()[:SEALER_ID_SIZE]


def seal(key: bytes, transition_hash: bytes, authority: CertificateAuthority) -> bytes:
    plaintext = authority.mesh_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    plaintext += authority.root_pem + authority.intermediate_pem + authority.mesh_ca_pem
    nonce = secrets.token_bytes(NONCE_SIZE)
    sealed = AESGCM(key).encrypt(nonce, plaintext, _ASSOCIATED_PREFIX + transition_hash)
    return FORMAT + nonce + sealed


def unseal(
    key: bytes,
    transition_hash: bytes,
    sealed: bytes,
    root_key: ec.EllipticCurvePrivateKey,
) -> CertificateAuthority:
    """The CA sealed for `transition_hash`; SealedAuthorityDamaged if altered, moved or foreign."""
    if not sealed.startswith(FORMAT) or len(sealed) < 1 + NONCE_SIZE + 16:
        raise SealedAuthorityDamaged(
            f"the sealed CA of {transition_hash.hex()} is truncated or unknown"
        )
    nonce, ciphertext = sealed[1 : 1 + NONCE_SIZE], sealed[1 + NONCE_SIZE :]
    try:
        plaintext = AESGCM(key).decrypt(nonce, ciphertext, _ASSOCIATED_PREFIX + transition_hash)
    except InvalidTag:
        raise SealedAuthorityDamaged(
            f"the sealed CA of {transition_hash.hex()} does not open with this seed:"
            " altered, moved from another state, or from another deployment"
        ) from None
    mesh_key = serialization.load_pem_private_key(plaintext, None)
    root, intermediate, mesh_ca = x509.load_pem_x509_certificates(plaintext)
    if not isinstance(mesh_key, ec.EllipticCurvePrivateKey) or mesh_ca.public_key() != (
        mesh_key.public_key()
    ):
        raise SealedAuthorityDamaged(f"the sealed CA of {transition_hash.hex()} is inconsistent")
    if root.public_key() != root_key.public_key():
        raise SealedAuthorityDamaged(f"the sealed CA of {transition_hash.hex()} has another root")
    return CertificateAuthority(root_key, mesh_key, root, intermediate, mesh_ca)
