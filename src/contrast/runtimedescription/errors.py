"""What a runtime description refuses, as one family under `ContrastError`."""

from __future__ import annotations

from contrast.errors import ContrastError


class RuntimeDescriptionError(ContrastError):
    """A runtime description is missing or malformed (shipped: a packaging bug, not user input)."""


class ArtefactUnreadable(RuntimeDescriptionError):
    """A file a description pins, or is being stamped from, cannot be read."""
