"""Failures of `contrast generate`."""

from __future__ import annotations

from contrast.errors import ContrastError


class GenerateError(ContrastError):
    """The resources cannot be turned into a consistent set of confidential workloads."""
