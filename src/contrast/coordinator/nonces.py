"""Single-use nonces for NewMeshCert: evidence must be made for a nonce this Coordinator just gave.

A nonce is accepted once, and only within its lifetime, so recorded evidence cannot be replayed.
The table is bounded: under a flood of GetNonce calls the oldest nonces are dropped, which costs
their holders a retry, never memory.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from datetime import datetime, timedelta

from contrast.atls.reportdata import NONCE_SIZE

LIFETIME = timedelta(minutes=2)
CAPACITY = 10_000


class NonceRegistry:
    def __init__(self, *, lifetime: timedelta = LIFETIME, capacity: int = CAPACITY) -> None:
        self._lifetime = lifetime
        self._capacity = capacity
        self._issued: OrderedDict[bytes, datetime] = OrderedDict()
        self._lock = threading.Lock()

    def issue(self, now: datetime) -> bytes:
        nonce = secrets.token_bytes(NONCE_SIZE)
        with self._lock:
            self._issued[nonce] = now + self._lifetime
            while len(self._issued) > self._capacity:
                self._issued.popitem(last=False)
        return nonce

    def consume(self, nonce: bytes, now: datetime) -> bool:
        """True exactly once for a nonce issued here and not yet expired."""
        with self._lock:
            expiry = self._issued.pop(nonce, None)
        return expiry is not None and now <= expiry
