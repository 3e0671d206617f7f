"""Failures of `contrast generate`."""

from __future__ import annotations

from contrast.errors import ContrastError


class GenerateError(ContrastError):
    """The resources cannot be turned into a consistent set of confidential workloads."""


class OwnerKeyRefused(GenerateError):
    """An owner key generate cannot use (the other kind of key) or cannot write (a file that
    appeared meanwhile, a write that failed); nothing of the run is written after it."""


class CannotWriteResources(GenerateError):
    """The changed resource files cannot be put in place; no file was replaced."""
