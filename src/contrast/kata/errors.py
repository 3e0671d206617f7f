"""What a Kata release can lack or get wrong, as one family under `ContrastError`."""

from __future__ import annotations

from contrast.errors import ContrastError


class KataReleaseError(ContrastError):
    """The release cannot be read or lacks what the platform's runtime needs."""


class BuildRequestRefused(KataReleaseError):
    """A runtime build asked for what cannot be built: options that exclude each other or are
    for another TEE, a value out of range, an output directory that cannot be written."""
