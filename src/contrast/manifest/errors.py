"""Errors of the manifest package."""

from __future__ import annotations

from contrast.errors import ContrastError


class ManifestError(ContrastError):
    """A manifest that cannot be read or is not valid; the message names the field."""
