"""The atls package's errors: its root, under the project's, and what it refuses.

aTLS raises these, not the bare `ContrastError` nor another package's errors, so that a caller
can tell a Coordinator it could not reach (`ConnectionFailed`, in `client`) from an issuer it was
asked to make with options that do not fit (`InvalidIssuerOptions`) by class, not by message.
"""

from __future__ import annotations

from contrast.errors import ContrastError


class AtlsError(ContrastError):
    """The root of the atls package's errors."""


class InvalidIssuerOptions(AtlsError):
    """Options for an evidence issuer that do not fit its kind (state, policy hash, socket)."""
