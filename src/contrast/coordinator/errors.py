"""Errors the Coordinator returns to its callers; each maps to one gRPC status."""

from __future__ import annotations

from enum import StrEnum

from contrast.errors import ContrastError


class Status(StrEnum):
    """The gRPC status a refusal maps to (names as in `grpc.StatusCode`)."""

    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    ABORTED = "ABORTED"
    INTERNAL = "INTERNAL"


class CoordinatorError(ContrastError):
    status = Status.INTERNAL


class NotReady(CoordinatorError):
    """No manifest yet, or in recovery mode, or already recovered."""

    status = Status.FAILED_PRECONDITION


class PermissionDenied(CoordinatorError):
    """The caller may not do this: unknown owner key, wrong seed, evidence not in the manifest."""

    status = Status.PERMISSION_DENIED


class InvalidRequest(CoordinatorError):
    """The request itself is malformed (manifest, policies, keys, nonce)."""

    status = Status.INVALID_ARGUMENT


class Conflict(CoordinatorError):
    """Another update won the race; the caller may retry after looking at the new state."""

    status = Status.ABORTED
