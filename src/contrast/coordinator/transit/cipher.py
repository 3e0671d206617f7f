"""Transit keys and Vault's ciphertext format: AES-256-GCM under a key derived from the seed.

A key is a function of the seed, the key name (a workload secret ID) and the version: the first
32 bytes of the workload secret of `"<version>_<name>"`, the original's derivation, so no key is
ever stored and every replica and every restart derives the same one. A ciphertext is Vault's
text form, `vault:v<version>:<base64(nonce ‖ sealed)>`, with a random 96-bit nonce.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from contrast.coordinator.transit.errors import BadRequest
from contrast.seed.engine import SeedEngine

KEY_SIZE = 32
NONCE_SIZE = 12
TAG_SIZE = 16
PREFIX = "vault"
# Vault numbers key versions from 1; the original keeps them in a uint32.
FIRST_VERSION = 1
LAST_VERSION = 2**32 - 1
_VERSION = re.compile(r"v([1-9][0-9]{0,9})")


def check_version(version: int) -> int:
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise BadRequest(f"key version {version} is out of range ({FIRST_VERSION}-{LAST_VERSION})")
    return version


@dataclass(frozen=True)
class TransitKey:
    """One version of one named key. Its repr never shows the key."""

    name: str
    version: int
    key: bytes = field(repr=False)

    @classmethod
    def derive(cls, seed: SeedEngine, name: str, version: int) -> TransitKey:
        check_version(version)
        secret = seed.workload_secret(f"{version}_{name}")
        return cls(name, version, secret[:KEY_SIZE])

    def encrypt(self, plaintext: bytes, associated_data: bytes | None) -> Ciphertext:
        nonce = secrets.token_bytes(NONCE_SIZE)
        sealed = AESGCM(self.key).encrypt(nonce, plaintext, associated_data)
        return Ciphertext(self.version, nonce, sealed)

    def decrypt(self, ciphertext: Ciphertext, associated_data: bytes | None) -> bytes:
        if ciphertext.version != self.version:
            raise BadRequest(f"the ciphertext is of key version {ciphertext.version}")
        try:
            return AESGCM(self.key).decrypt(ciphertext.nonce, ciphertext.sealed, associated_data)
        except InvalidTag:
            # Vault's words: the key, the ciphertext or the associated data is not the one used.
            raise BadRequest("cipher: message authentication failed") from None


@dataclass(frozen=True)
class Ciphertext:
    """`vault:v<version>:<base64(nonce ‖ sealed)>`; `sealed` ends with the 16-byte GCM tag."""

    version: int
    nonce: bytes
    sealed: bytes

    @classmethod
    def from_text(cls, text: str) -> Ciphertext:
        parts = text.split(":", 2)
        if len(parts) != 3 or parts[0] != PREFIX:
            raise BadRequest("the ciphertext is not of the form vault:v<version>:<base64>")
        match = _VERSION.fullmatch(parts[1])
        if match is None:
            raise BadRequest(
                f"the ciphertext's version {parts[1][:16]!r} is not v1, v2, ... (Vault's versions"
                " start at 1)"
            )
        version = check_version(int(match.group(1)))
        try:
            raw = base64.b64decode(parts[2], validate=True)
        except binascii.Error:
            raise BadRequest("the ciphertext's payload is not base64") from None
        if len(raw) < NONCE_SIZE + TAG_SIZE:
            raise BadRequest("the ciphertext is too short for a nonce and a tag")
        return cls(version, raw[:NONCE_SIZE], raw[NONCE_SIZE:])

    def to_text(self) -> str:
        payload = base64.b64encode(self.nonce + self.sealed).decode()
        return f"{PREFIX}:v{self.version}:{payload}"
