"""The transit engine's refusals, each with the HTTP status Vault gives the same refusal."""

from __future__ import annotations

from http import HTTPStatus

from contrast.coordinator.errors import CoordinatorPackageError


class TransitError(CoordinatorPackageError):
    """A request the transit engine does not serve; the message goes to the caller."""

    status = HTTPStatus.BAD_REQUEST


class BadRequest(TransitError):
    """Malformed or unsupported input: the body, a field, a ciphertext; or a failed decryption."""


class Forbidden(TransitError):
    """The caller may not use this key: no mesh certificate of the active manifest, or another
    workload's key (Vault's "permission denied")."""

    status = HTTPStatus.FORBIDDEN


class UnsupportedPath(TransitError):
    """A Vault path the Coordinator does not serve (it serves transit encrypt and decrypt)."""

    status = HTTPStatus.NOT_FOUND


class UnsupportedMethod(TransitError):
    status = HTTPStatus.METHOD_NOT_ALLOWED


class NotServing(TransitError):
    """No key can be derived now: no manifest, recovery mode, or the history cannot be read."""

    status = HTTPStatus.SERVICE_UNAVAILABLE
