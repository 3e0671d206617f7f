"""Threshold seed shares: the seed split so that any K of N seed share owners recover it.

The original gives every owner the whole seed, so one key opens it and every key must be
trusted alike. With `SeedshareThreshold` K > 1 in the manifest the Coordinator instead splits
the seed with Shamir's secret sharing as SLIP-0039 specifies it (one group, K of N members),
using Trezor's reference implementation (`shamir-mnemonic`): fewer than K shares leave
every seed possible but for SLIP-0039's 4-byte digest, which a search of the whole seed space
could test (tests/seed/test_threshold.py measures both), and a recombined seed is checked
against the digest share SLIP-0039 embeds, so
a damaged or substituted share is refused rather than turned into a wrong seed. Each owner's
share is a SLIP-0039 mnemonic (words they could also keep on paper); encrypted to their key it
travels as the mnemonic's 10-bit word indices, packed, to stay within what RSA-OAEP can hold.

K = 1 is not handled here: then every owner's share is the seed itself, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from shamir_mnemonic import (  # type: ignore[import-untyped]
    MnemonicError,
    combine_mnemonics,
    generate_mnemonics,
)
from shamir_mnemonic.wordlist import (  # type: ignore[import-untyped]
    mnemonic_from_indices,
    mnemonic_to_indices,
)

from contrast.seed.errors import SeedError

# SLIP-0039 allows at most 16 members in a group.
MAX_OWNERS = 16
_MAGIC = b"contrast-slip39\x00"
_WORD_BITS = 10
# No passphrase (the shares are protected by the owners' keys), the cheapest iteration count.
_PASSPHRASE = b""
_ITERATION_EXPONENT = 0


class ThresholdError(SeedError):
    """Shares that cannot give the seed: too few, damaged, or from another split."""


def split(seed: bytes, threshold: int, owners: int) -> list[str]:
    """`owners` mnemonics, any `threshold` of which give back `seed`."""
    if not 2 <= threshold <= owners <= MAX_OWNERS:
        raise ThresholdError(
            f"a seed share threshold of {threshold} with {owners} owners cannot be split",
            hint=f"use 2 ≤ threshold ≤ owners ≤ {MAX_OWNERS}, or threshold 1",
        )
    (group,) = generate_mnemonics(
        1, [(threshold, owners)], seed, _PASSPHRASE, True, _ITERATION_EXPONENT
    )
    return list(group)


def combine(mnemonics: Sequence[str]) -> bytes:
    """The seed from at least `threshold` distinct mnemonics of one split."""
    try:
        seed: bytes = combine_mnemonics(list(dict.fromkeys(mnemonics)), _PASSPHRASE)
        return seed
    except MnemonicError as error:
        raise ThresholdError(
            f"the seed shares do not give the seed: {error}",
            hint="bring shares of as many different owners as the manifest's SeedshareThreshold",
        ) from None


def pack(mnemonic: str) -> bytes:
    """A mnemonic as bytes to encrypt: a marker, the word count, the word indices."""
    indices = mnemonic_to_indices(mnemonic)
    value = 0
    for index in indices:
        value = (value << _WORD_BITS) | index
    size = (len(indices) * _WORD_BITS + 7) // 8
    return _MAGIC + bytes([len(indices)]) + value.to_bytes(size, "big")


def unpack(data: bytes) -> str:
    """The mnemonic `pack` made; a ThresholdError for anything else."""
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 1:
        raise ThresholdError(
            "the decrypted seed share is not a threshold share",
            hint="the manifest's SeedshareThreshold and the seed share document disagree",
        )
    count = data[len(_MAGIC)]
    body = data[len(_MAGIC) + 1 :]
    if len(body) != (count * _WORD_BITS + 7) // 8:
        raise ThresholdError("the decrypted seed share is cut short or too long")
    value = int.from_bytes(body, "big")
    mask = (1 << _WORD_BITS) - 1
    indices = [(value >> (_WORD_BITS * (count - 1 - n))) & mask for n in range(count)]
    mnemonic: str = mnemonic_from_indices(indices)
    return mnemonic


def is_packed(data: bytes) -> bool:
    return data.startswith(_MAGIC)


__all__ = ["MAX_OWNERS", "ThresholdError", "combine", "is_packed", "pack", "split", "unpack"]
