"""Errors of the history package."""

from __future__ import annotations

from contrast.errors import ContrastError


class HistoryError(ContrastError):
    """The stored history cannot be read or changed as asked."""


class DamagedEntry(HistoryError):
    """An entry the history needs is missing, truncated or altered: the store lost or changed it."""


class HashMismatch(DamagedEntry):
    """A content-addressed entry whose bytes do not hash to its name: the store was altered."""


class BadSignature(HistoryError):
    """The head's signature does not verify with the seed-derived key: tampered or foreign."""


class ConcurrentUpdate(HistoryError):
    """The head changed between reading and replacing it (compare-and-swap lost)."""


class EntryTooLarge(HistoryError):
    """An entry larger than every backend can hold (a ConfigMap: 1 MiB): refused before writing."""
