"""The paths and methods the transit engine serves, and the rest refused by name."""

from __future__ import annotations

import pytest

from contrast.coordinator.transit.engine import Route, route
from contrast.coordinator.transit.errors import UnsupportedMethod, UnsupportedPath


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("PUT", "/v1/transit/encrypt/vault_unsealing", Route("encrypt", "vault_unsealing")),
        ("POST", "/v1/transit/decrypt/vault_unsealing?x=1", Route("decrypt", "vault_unsealing")),
        # Vault's client joins the key name into the path unescaped, hvac escapes it.
        ("PUT", "/v1/transit/encrypt/apps/v1/StatefulSet/default/vault",
         Route("encrypt", "apps/v1/StatefulSet/default/vault")),
        ("PUT", "/v1/transit/encrypt/apps%2Fv1%2FStatefulSet",
         Route("encrypt", "apps/v1/StatefulSet")),
    ],
)  # fmt: skip
def test_served_routes(method: str, path: str, expected: Route) -> None:
    assert route(method, path) == expected


@pytest.mark.parametrize(
    ("method", "path", "error", "reason"),
    [
        ("GET", "/v1/transit/encrypt/vault", UnsupportedMethod, "takes PUT or POST"),
        ("PUT", "/v1/transit/encrypt/", UnsupportedPath, "needs a key name"),
        ("PUT", "/v1/transit/encrypt", UnsupportedPath, "needs a key name"),
        ("POST", "/v1/transit/keys/vault", UnsupportedPath, "nothing to create, read, rotate"),
        ("POST", "/v1/transit/keys/vault/rotate", UnsupportedPath, "nothing to create"),
        ("POST", "/v1/transit/datakey/plaintext/vault", UnsupportedPath, "nothing to create"),
        ("POST", "/v1/auth/token/renew-self", UnsupportedPath, "serves /v1/transit/encrypt"),
        ("GET", "/v1/sys/health", UnsupportedPath, "serves /v1/transit/encrypt"),
        ("PUT", "/v2/transit/encrypt/vault", UnsupportedPath, "serves /v1/transit/encrypt"),
    ],
)
def test_refused_routes(method: str, path: str, error: type[Exception], reason: str) -> None:
    with pytest.raises(error, match=reason):
        route(method, path)
