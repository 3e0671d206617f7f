"""Nonces are single use, expire, and the table stays bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contrast.coordinator.nonces import NonceRegistry

NOW = datetime(2026, 11, 23, tzinfo=UTC)


def test_a_nonce_is_accepted_once() -> None:
    registry = NonceRegistry()
    nonce = registry.issue(NOW)
    assert len(nonce) == 32
    assert registry.consume(nonce, NOW)
    assert not registry.consume(nonce, NOW)


def test_unknown_and_expired_nonces_are_refused() -> None:
    registry = NonceRegistry(lifetime=timedelta(seconds=10))
    assert not registry.consume(b"\0" * 32, NOW)
    nonce = registry.issue(NOW)
    assert not registry.consume(nonce, NOW + timedelta(seconds=11))


def test_oldest_nonces_are_dropped_beyond_capacity() -> None:
    registry = NonceRegistry(capacity=3)
    nonces = [registry.issue(NOW) for _ in range(4)]
    assert not registry.consume(nonces[0], NOW)
    assert all(registry.consume(nonce, NOW) for nonce in nonces[1:])
