"""The transit engine through hvac, a real Vault client, making every call Vault's seal makes.

Vault's and OpenBao's `seal "transit"` (go-kms-wrapping's transit wrapper) calls, in order:
`auth/token/renew-self` only if it has a token and renewal is on (a failure turns renewal off),
then `PUT transit/encrypt/<key_name>` with `{"plaintext": base64("a")}` as its start-up test, then
encrypt and decrypt of the root key; it reads `data.ciphertext` (splitting `vault:vN:...` for the
key id) and `data.plaintext`. Each test names the attack or the failure it shows refused.
"""

from __future__ import annotations

import base64
from pathlib import Path

import hvac
import hvac.exceptions
import pytest

from tests.coordinator.conftest import Deployment
from tests.coordinator.transit.conftest import Running, workload


def client(running: Running, cert: tuple[str, str] | None, verify: str | bool) -> hvac.Client:
    return hvac.Client(url=running.url, cert=cert, verify=verify, timeout=10)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def seal_start(vault: hvac.Client, key_name: str) -> str:
    """What the seal does when Vault starts: renew-self (tolerating failure), the test encrypt.

    Returns the key id the seal records (the `vN` of the ciphertext).
    """
    vault.token = "s.not-a-token"
    with pytest.raises(hvac.exceptions.InvalidPath):
        vault.auth.token.renew_self()
    answer = vault.secrets.transit.encrypt_data(key_name, b64(b"a"), mount_point="transit")
    ciphertext = answer["data"]["ciphertext"]
    parts = ciphertext.split(":")
    assert len(parts) == 3, ciphertext
    return str(parts[1])


def test_the_seal_calls_round_trip_a_root_key(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    web = workload(running.coordinator, deployment, "web", tmp_path)
    vault = client(running, web.cert, web.mesh_ca)
    assert seal_start(vault, web.workload_secret_id) == "v1"
    root_key = bytes(range(32))
    sealed = vault.secrets.transit.encrypt_data(
        web.workload_secret_id, b64(root_key), mount_point="transit"
    )["data"]
    assert sealed["ciphertext"].startswith("vault:v1:")
    assert sealed["key_version"] == 1
    opened = vault.secrets.transit.decrypt_data(
        web.workload_secret_id, sealed["ciphertext"], mount_point="transit"
    )
    assert base64.b64decode(opened["data"]["plaintext"]) == root_key
    again = vault.secrets.transit.encrypt_data(
        web.workload_secret_id, b64(root_key), mount_point="transit"
    )["data"]["ciphertext"]
    assert again != sealed["ciphertext"], "a fresh nonce for every encryption"
