"""A state's CA sealed for the history: every replica and every restart serves the same mesh CA.

The original keeps the mesh CA key only in memory: a restart makes a new one, and a replica that
follows another's manifest needs that replica alive to hand the key over. Here the CA of each
state is stored beside its transition, sealed with AES-256-GCM under a seed-derived key
(`SeedEngine.authority_sealing_key`), the transition hash as associated data, so an entry cannot
be moved to another state; only a holder of the seed can open it, and any change is detected.

Layout: `0x01 ‖ 12-byte nonce ‖ AES-GCM(mesh key PKCS#8 PEM ‖ root ‖ intermediate ‖ mesh CA PEM)`.
"""

from __future__ import annotations

import secrets

from cryptography import x509
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from contrast.ca.authority import CertificateAuthority
from contrast.history.errors import DamagedEntry

FORMAT = b"\x01"
NONCE_SIZE = 12
_ASSOCIATED_PREFIX = b"contrast sealed authority\x00"


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
    """The CA sealed for `transition_hash`; DamagedEntry if it was altered, moved or foreign."""
    if not sealed.startswith(FORMAT) or len(sealed) < 1 + NONCE_SIZE + 16:
        raise DamagedEntry(f"the sealed CA of {transition_hash.hex()} is truncated or unknown")
    nonce, ciphertext = sealed[1 : 1 + NONCE_SIZE], sealed[1 + NONCE_SIZE :]
    try:
        plaintext = AESGCM(key).decrypt(nonce, ciphertext, _ASSOCIATED_PREFIX + transition_hash)
    except InvalidTag:
        raise DamagedEntry(
            f"the sealed CA of {transition_hash.hex()} does not open with this seed:"
            " altered, moved from another state, or from another deployment"
        ) from None
    mesh_key = serialization.load_pem_private_key(plaintext, None)
    root, intermediate, mesh_ca = x509.load_pem_x509_certificates(plaintext)
    if not isinstance(mesh_key, ec.EllipticCurvePrivateKey) or mesh_ca.public_key() != (
        mesh_key.public_key()
    ):
        raise DamagedEntry(f"the sealed CA of {transition_hash.hex()} is inconsistent")
    if root.public_key() != root_key.public_key():
        raise DamagedEntry(f"the sealed CA of {transition_hash.hex()} has another root")
    return CertificateAuthority(root_key, mesh_key, root, intermediate, mesh_ca)
