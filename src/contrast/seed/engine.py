"""Everything the Coordinator derives from its secret seed.

After a restart the Coordinator gets back only the seed and salt (from a seed share owner or a
peer); every long-lived secret must therefore be a function of them: the root CA key, the key that
signs the history head, and each workload's secret. Labels and sizes follow the original
(`internal/seedengine`), so a reader of either finds the other.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from contrast.seed.errors import SeedError
from contrast.seed.keygen import derive_ecdsa_key

SEED_SIZE = 64
SALT_SIZE = 32
MINIMUM_SEED_SIZE = 32
# HKDF-SHA256 expands to at most 255 blocks of 32 bytes, and each derivation is as long as its
# input: a longer seed cannot be used (RFC 5869 §2.3).
MAXIMUM_SEED_SIZE = 255 * 32

_POD_STATE_LABEL = b"POD STATE SECRET"
_TRANSACTION_SIGNING_LABEL = b"TRANSACTION SIGNING SECRET"
_ROOT_CA_LABEL = b"ROOT CA SEED"
_WORKLOAD_SECRET_PREFIX = b"WORKLOAD SECRET ID: "
# Beyond the original: the key that seals each state's CA in the history (contrast.ca.sealed).
_AUTHORITY_SEALING_LABEL = b"AUTHORITY SEALING KEY"
AUTHORITY_SEALING_KEY_SIZE = 32


@dataclass(frozen=True)
class SeedEngine:
    """Derivations from one (seed, salt) pair. Its repr never shows them."""

    seed: bytes = field(repr=False)
    salt: bytes = field(repr=False)
    _pod_state_secret: bytes = field(init=False, repr=False)
    root_ca_key: ec.EllipticCurvePrivateKey = field(init=False, repr=False)
    transaction_signing_key: ec.EllipticCurvePrivateKey = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.salt) != SALT_SIZE:
            raise SeedError(f"the salt must be {SALT_SIZE} bytes, got {len(self.salt)}")
        if len(self.seed) < MINIMUM_SEED_SIZE:
            raise SeedError(
                f"the seed must be at least {MINIMUM_SEED_SIZE} bytes, got {len(self.seed)}"
            )
        if len(self.seed) > MAXIMUM_SEED_SIZE:
            raise SeedError(
                f"the seed must be at most {MAXIMUM_SEED_SIZE} bytes (what HKDF-SHA256 can"
                f" expand), got {len(self.seed)}"
            )
        object.__setattr__(self, "_pod_state_secret", self._derive(self.seed, _POD_STATE_LABEL))
        object.__setattr__(
            self,
            "root_ca_key",
            derive_ecdsa_key(self._derive(self.seed, _ROOT_CA_LABEL), ec.SECP384R1()),
        )
        object.__setattr__(
            self,
            "transaction_signing_key",
            derive_ecdsa_key(self._derive(self.seed, _TRANSACTION_SIGNING_LABEL), ec.SECP384R1()),
        )

    @classmethod
    def generate(cls) -> SeedEngine:
        """A fresh engine from the operating system's CSPRNG (first SetManifest)."""
        return cls(secrets.token_bytes(SEED_SIZE), secrets.token_bytes(SALT_SIZE))

    def workload_secret(self, workload_secret_id: str) -> bytes:
        """The 64-byte secret of every pod whose manifest entry has this id."""
        if not workload_secret_id:
            raise SeedError("a workload secret needs a non-empty workload secret id")
        label = _WORKLOAD_SECRET_PREFIX + workload_secret_id.encode()
        return self._derive(self._pod_state_secret, label)

    def authority_sealing_key(self) -> bytes:
        """The AES-256 key that seals every state's CA in the history (one per seed)."""
        hkdf = HKDF(
            algorithm=hashes.SHA256(),
            length=AUTHORITY_SEALING_KEY_SIZE,
            salt=self.salt,
            info=_AUTHORITY_SEALING_LABEL,
        )
        return hkdf.derive(self.seed)

    def _derive(self, secret: bytes, label: bytes) -> bytes:
        # HKDF output as long as its input, as the original does (64 bytes for a 64-byte seed).
        hkdf = HKDF(algorithm=hashes.SHA256(), length=len(secret), salt=self.salt, info=label)
        return hkdf.derive(secret)
