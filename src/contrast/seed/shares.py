"""Seed shares: the seed encrypted to each seed share owner, the only way it leaves the Coordinator.

RSA-OAEP with SHA-256 and the label "seedshare", one share per owner key, as the original; the
document is what `contrast set` saves as `seed-shares.json` and `contrast recover` reads back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from contrast.boundedjson import JsonInputError, JsonLimits, load
from contrast.seed.errors import SeedError

OAEP_LABEL = b"seedshare"


# A seed share document holds one encrypted seed per owner key: 1 MiB is thousands of owners.
SEED_SHARES_LIMITS = JsonLimits(max_bytes=1 << 20, max_depth=8)


class SeedShareError(SeedError):
    """A seed share document that cannot be read, or a share no given key can open."""


def _oaep() -> padding.OAEP:
    return padding.OAEP(
        mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=OAEP_LABEL
    )


def public_key_hex(key: rsa.RSAPublicKey) -> str:
    """The manifest's form of a seed share owner key: hex of the PKCS#1 DER public key."""
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.PKCS1).hex()


def load_public_key_hex(text: str) -> rsa.RSAPublicKey:
    try:
        # load_der_public_key accepts PKCS#1 as well as SubjectPublicKeyInfo.
        key = serialization.load_der_public_key(bytes.fromhex(text))
    except ValueError as error:
        raise SeedShareError(f"not a hex PKCS#1 RSA public key: {error}") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise SeedShareError("seed share owner keys must be RSA keys")
    return key


@dataclass(frozen=True)
class SeedShare:
    public_key: str
    encrypted_seed: bytes


@dataclass(frozen=True)
class SeedShareDocument:
    """The salt and one encrypted seed per owner key."""

    shares: tuple[SeedShare, ...]
    salt: bytes

    @classmethod
    def create(
        cls,
        seed: bytes,
        salt: bytes,
        owner_keys: Sequence[rsa.RSAPublicKey],
        *,
        threshold: int = 1,
    ) -> SeedShareDocument:
        """Each owner's share encrypted to their key: the seed itself, or (threshold K > 1) a
        Shamir share of which any K give the seed (`contrast.seed.threshold`)."""
        if threshold == 1:
            payloads = [seed] * len(owner_keys)
        else:
            # Imported here: generate reads owner keys with this module on every run, and
            # shamir-mnemonic's import (9 ms) is needed only to split a seed.
            from contrast.seed import threshold as threshold_sharing  # noqa: PLC0415

            mnemonics = threshold_sharing.split(seed, threshold, len(owner_keys))
            payloads = [threshold_sharing.pack(mnemonic) for mnemonic in mnemonics]
        shares = tuple(
            SeedShare(public_key_hex(key), key.encrypt(payload, _oaep()))
            for key, payload in zip(owner_keys, payloads, strict=True)
        )
        return cls(shares, salt)

    def decrypt(self, owner_key: rsa.RSAPrivateKey) -> bytes:
        """What was encrypted to `owner_key`: the seed, or its packed threshold share."""
        wanted = public_key_hex(owner_key.public_key())
        for share in self.shares:
            if share.public_key == wanted:
                try:
                    return owner_key.decrypt(share.encrypted_seed, _oaep())
                except ValueError:
                    raise SeedShareError(
                        "the seed share for this key does not decrypt: the file is damaged"
                    ) from None
        raise SeedShareError(
            "no seed share in the document is for this key",
            hint="use the seed share owner key whose public key is in the manifest",
        )

    def to_json(self) -> bytes:
        document = {
            "SeedShares": [
                {"PublicKey": share.public_key, "EncryptedSeed": share.encrypted_seed.hex()}
                for share in self.shares
            ],
            "Salt": self.salt.hex(),
        }
        return json.dumps(document, indent=2).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> SeedShareDocument:
        try:
            document = load(data, SEED_SHARES_LIMITS, what="it")
        except JsonInputError as error:
            raise SeedShareError(f"not a seed share document: {error.message}") from None
        try:
            shares = tuple(
                SeedShare(str(item["PublicKey"]), bytes.fromhex(item["EncryptedSeed"]))
                for item in document["SeedShares"]
            )
            return cls(shares, bytes.fromhex(document["Salt"]))
        except KeyError as error:
            raise SeedShareError(f"not a seed share document: it lacks {error.args[0]}") from None
        except (ValueError, TypeError) as error:
            # ValueError: a field that is not hex; the others: a field of another JSON type.
            raise SeedShareError(
                f"not a seed share document: SeedShares must list objects with hex"
                f" EncryptedSeed and Salt must be hex ({error})"
            ) from None
