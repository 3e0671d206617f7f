"""Errors the Coordinator returns to its callers, each mapped to one gRPC status, and their root."""

from __future__ import annotations

from enum import StrEnum

from contrast.errors import ContrastError


class Status(StrEnum):
    """The gRPC status a refusal maps to (names as in `grpc.StatusCode`)."""

    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    ABORTED = "ABORTED"
    DATA_LOSS = "DATA_LOSS"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"


class CoordinatorPackageError(ContrastError):
    """The root of the coordinator package's errors.

    Under it: `CoordinatorError`, a refusal the Coordinator answers a caller with (it carries the
    gRPC status), and the errors of running the Coordinator itself (a port taken, a peer recovery
    or a handover that failed, a worker that did not start, the transit engine's refusals), which
    answer nobody over gRPC. Callers that map refusals catch `CoordinatorError`.
    """


class CoordinatorError(CoordinatorPackageError):
    status = Status.INTERNAL


class NotReady(CoordinatorError):
    """No manifest yet, or in recovery mode, or already recovered."""

    status = Status.FAILED_PRECONDITION


class PermissionDenied(CoordinatorError):
    """The caller may not do this: unknown owner key, wrong seed, evidence not in the manifest."""

    status = Status.PERMISSION_DENIED


class NonceRefused(PermissionDenied):
    """The nonce is not one this replica issued, has expired, or was used already (a replay)."""


class EvidenceRefused(PermissionDenied):
    """The evidence fails the active manifest: not authentic, reference values not met, or made
    for another key or nonce (a substituted key)."""


class NotACoordinator(PermissionDenied):
    """Peer recovery asked by evidence whose policy hash is not a `coordinator` entry of the
    active manifest (a workload's, or none of the manifest's)."""


class InvalidRequest(CoordinatorError):
    """The request itself is malformed (manifest, policies, keys, nonce)."""

    status = Status.INVALID_ARGUMENT


class Conflict(CoordinatorError):
    """Another update won the race; the caller may retry after looking at the new state."""

    status = Status.ABORTED


class StoredStateDamaged(CoordinatorError):
    """The Coordinator's stored history is damaged or incomplete (truncated, missing, altered).

    Not the caller's fault and not fixed by retrying: the state volume needs an operator. The
    message names the entry that failed its check.
    """

    status = Status.DATA_LOSS


# What every `StoredStateDamaged` for damage in the stored history tells the operator.
RESTORE_HINT = "the Coordinator's state was altered or lost; restore its volume from a backup"


def history_damaged(detail: str) -> StoredStateDamaged:
    """Damage found in the stored history (`detail` names the entry), as the Coordinator says it.

    One wording for the damage the history package finds (`core.stored_state_error`) and the
    damage the Coordinator finds in what it read (a head gone, a stored manifest not valid).
    """
    return StoredStateDamaged(f"the stored history is damaged: {detail}", hint=RESTORE_HINT)


class InvalidOption(CoordinatorPackageError):
    """An option of `contrast coordinator` out of its range, refused before anything starts."""


class StateUnavailable(CoordinatorError):
    """The history's store cannot be read or written (I/O error, unreachable API): retry later."""

    status = Status.UNAVAILABLE
