"""The api package's errors: its root, under the project's.

The package raises these, not the bare `ContrastError`, so that a caller can tell a pod's TEE it
could not reach (`EndpointError`, in `teeendpoint`) from bytes that are not the message they
should be (`MalformedMessage`, in `wire`) by class, and both from other packages' errors.
"""

from __future__ import annotations

from contrast.errors import ContrastError


class ApiError(ContrastError):
    """The root of the api package's errors."""
