"""A bounded memo keyed by the identity of immutable objects (certificates, CRLs, root stores).

Verifiers remember what they checked about a certificate (its chain, its extensions) because
the same VCEK or PCK arrives with every pod's evidence. `functools.lru_cache` keys them by
value, and `cryptography` computes a certificate's hash and equality from its DER on every
call: about 15 microseconds per certificate and lookup, which made the lookups of one SNP
verification cost a fifth of its one signature check. The loaders hand out one object per
distinct input (`certificates.load_certificates` keeps them by their bytes), so identity is
the cheap key.

Identity is a sound key only while the object cannot be replaced by another at the same
address: each entry holds the objects of its key, so their ids cannot be reused while the
entry exists, and a lookup compares the held objects with `is`. Objects that are equal but
not identical miss and are checked again; nothing is ever taken for another object. Only
results of checks that passed are stored (a failure is raised again from scratch).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

Value = TypeVar("Value")


class IdentityMemo(Generic[Value]):
    """At most `size` results, each for one tuple of objects; least recently used goes first."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("an identity memo holds at least one entry")
        self._size = size
        self._entries: OrderedDict[tuple[int, ...], tuple[tuple[object, ...], Value]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def get(self, *objects: object) -> Value | None:
        """The result stored for exactly these objects (by identity, in order), or None."""
        key = tuple(map(id, objects))
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            held, value = entry
            if any(a is not b for a, b in zip(held, objects, strict=True)):
                return None  # unreachable while entries hold their objects; kept as a guard
            self._entries.move_to_end(key)
            return value

    def put(self, value: Value, *objects: object) -> None:
        """Remember `value` for these objects, holding them so that their ids stay theirs."""
        key = tuple(map(id, objects))
        with self._lock:
            self._entries[key] = (objects, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
