"""The transit engine through hvac, a real Vault client, making every call Vault's seal makes.

Vault's and OpenBao's `seal "transit"` (go-kms-wrapping's transit wrapper) calls, in order:
`auth/token/renew-self` only if it has a token and renewal is on (a failure turns renewal off),
then `PUT transit/encrypt/<key_name>` with `{"plaintext": base64("a")}` as its start-up test, then
encrypt and decrypt of the root key; it reads `data.ciphertext` (splitting `vault:vN:...` for the
key id) and `data.plaintext`. Each test names the attack or the failure it shows refused.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import hvac
import hvac.exceptions
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from contrast.ca.authority import CertificateAuthority
from contrast.seed.engine import SeedEngine
from tests.coordinator.conftest import Deployment
from tests.coordinator.transit.conftest import NAMES, Running, serve, workload


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


def test_another_workloads_key_is_refused(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    """Attack: a workload asks for another workload's key (to unseal that workload's Vault)."""
    web = workload(running.coordinator, deployment, "web", tmp_path / "web")
    other = workload(running.coordinator, deployment, "client", tmp_path / "client")
    sealed = client(running, other.cert, other.mesh_ca).secrets.transit.encrypt_data(
        other.workload_secret_id, b64(b"root key"), mount_point="transit"
    )["data"]["ciphertext"]
    thief = client(running, web.cert, web.mesh_ca)
    for attempt in (
        lambda: thief.secrets.transit.encrypt_data(
            other.workload_secret_id, b64(b"x"), mount_point="transit"
        ),
        lambda: thief.secrets.transit.decrypt_data(
            other.workload_secret_id, sealed, mount_point="transit"
        ),
    ):
        with pytest.raises(hvac.exceptions.Forbidden, match="is not this workload's") as refused:
            attempt()
        assert web.workload_secret_id in str(refused.value)
    # Its own key does not open the other's ciphertext either.
    with pytest.raises(hvac.exceptions.InvalidRequest, match="message authentication failed"):
        thief.secrets.transit.decrypt_data(web.workload_secret_id, sealed, mount_point="transit")


def test_a_client_without_a_certificate_is_refused_at_the_handshake(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    web = workload(running.coordinator, deployment, "web", tmp_path)
    with pytest.raises(requests.exceptions.ConnectionError):
        client(running, None, web.mesh_ca).secrets.transit.encrypt_data(
            web.workload_secret_id, b64(b"x"), mount_point="transit"
        )


def test_a_certificate_of_another_mesh_ca_is_refused(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    """Attack: a certificate with the right workload secret ID from another Coordinator (another
    deployment, or one the attacker runs with the same manifest), or made by the attacker."""
    other_deployment = Deployment(
        deployment.tee,
        deployment.owner,
        deployment.seedshare,
        deployment.policies,
        tmp_path / "other-state",
    )
    elsewhere = other_deployment.coordinator()
    elsewhere.set_manifest(other_deployment.manifest(NAMES), other_deployment.documents(NAMES))
    foreign = workload(elsewhere, other_deployment, "web", tmp_path / "foreign")
    ours = workload(running.coordinator, deployment, "web", tmp_path / "ours")
    assert foreign.workload_secret_id == ours.workload_secret_id
    # The foreign certificate, trusting our server: the handshake fails on our side.
    with pytest.raises(requests.exceptions.ConnectionError):
        client(running, foreign.cert, ours.mesh_ca).secrets.transit.encrypt_data(
            ours.workload_secret_id, b64(b"x"), mount_point="transit"
        )
    # And a client that trusts the other mesh CA does not trust our server.
    with pytest.raises(requests.exceptions.SSLError):
        client(running, ours.cert, foreign.mesh_ca).secrets.transit.encrypt_data(
            ours.workload_secret_id, b64(b"x"), mount_point="transit"
        )
    forged = tmp_path / "forged"
    forged.mkdir()
    attacker_ca = ec.generate_private_key(ec.SECP384R1())
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    authority = CertificateAuthority.create(attacker_ca, attacker_ca, now=datetime.now(UTC))
    leaf = authority.issue_mesh_certificate(
        leaf_key.public_key(),
        ["web"],
        now=datetime.now(UTC),
        workload_secret_id=ours.workload_secret_id,
    )
    (forged / "chain.pem").write_bytes(leaf.public_bytes(Encoding.PEM))
    (forged / "key.pem").write_bytes(
        leaf_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    )
    with pytest.raises(requests.exceptions.ConnectionError):
        client(
            running, (str(forged / "chain.pem"), str(forged / "key.pem")), ours.mesh_ca
        ).secrets.transit.encrypt_data(ours.workload_secret_id, b64(b"x"), mount_point="transit")


def test_without_a_manifest_the_answer_says_so(deployment: Deployment, tmp_path: Path) -> None:
    coordinator = deployment.coordinator()
    server = serve(coordinator)
    try:
        url = f"https://localhost:{server.port}"
        unverified = hvac.Client(url=url, verify=False, timeout=10)
        with pytest.raises(hvac.exceptions.VaultDown, match="no manifest is set"):
            unverified.secrets.transit.encrypt_data("web", b64(b"x"), mount_point="transit")
        # A verifying client refuses the stand-in certificate: nothing to trust yet.
        with pytest.raises(requests.exceptions.SSLError):
            requests.put(f"{url}/v1/transit/encrypt/web", json={}, timeout=10)
        # The next connection after `contrast set` is served.
        coordinator.set_manifest(deployment.manifest(NAMES), deployment.documents(NAMES))
        web = workload(coordinator, deployment, "web", tmp_path)
        answer = hvac.Client(url=url, cert=web.cert, verify=web.mesh_ca, timeout=10)
        assert answer.secrets.transit.encrypt_data(
            web.workload_secret_id, b64(b"x"), mount_point="transit"
        )["data"]["ciphertext"].startswith("vault:v1:")
    finally:
        server.stop()


def test_keys_survive_a_restart_and_are_the_same_on_every_replica(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    """A restarted Coordinator, or another replica on the same history, derives the same key
    once it has the seed; until then it answers 503, not a wrong key."""
    web = workload(running.coordinator, deployment, "web", tmp_path)
    sealed = client(running, web.cert, web.mesh_ca).secrets.transit.encrypt_data(
        web.workload_secret_id, b64(b"root key"), mount_point="transit"
    )["data"]["ciphertext"]
    replica = deployment.coordinator()  # the same history: a restart, or a second replica
    server = serve(replica)
    try:
        url = f"https://localhost:{server.port}"
        with pytest.raises(hvac.exceptions.VaultDown, match="recovery mode"):
            hvac.Client(url=url, verify=False, timeout=10).secrets.transit.decrypt_data(
                web.workload_secret_id, sealed, mount_point="transit"
            )
        replica.recover(running.seed, running.salt)
        # The Vault's certificate from before the restart still works: the mesh CA is the one
        # sealed in the history.
        vault = hvac.Client(url=url, cert=web.cert, verify=web.mesh_ca, timeout=10)
        opened = vault.secrets.transit.decrypt_data(
            web.workload_secret_id, sealed, mount_point="transit"
        )
        assert base64.b64decode(opened["data"]["plaintext"]) == b"root key"
    finally:
        server.stop()


def test_a_manifest_update_cuts_off_the_old_mesh_ca_even_on_a_kept_connection(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    """Attack: a workload removed by a manifest update keeps its open connection (Vault's client
    keeps connections alive) and goes on using its key."""
    web = workload(running.coordinator, deployment, "web", tmp_path / "web")
    session = requests.Session()
    url = f"{running.url}/v1/transit/encrypt/{web.workload_secret_id}"
    sent = {"json": {"plaintext": b64(b"x")}, "cert": web.cert, "verify": web.mesh_ca}
    assert session.put(url, timeout=10, **sent).status_code == 200
    deployment.update(running.coordinator, ("coordinator", "client"))
    kept = session.put(url, timeout=10, **sent)
    assert kept.status_code == 403
    assert "not from the active manifest's mesh CA" in kept.json()["errors"][0]
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.put(url, json={"plaintext": b64(b"x")}, cert=web.cert, timeout=10, verify=False)


def test_key_versions_are_separate_keys(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    """As the original: a key_version is another key derived the same way (rotation without a
    new workload secret ID); a ciphertext relabelled to another version does not open."""
    web = workload(running.coordinator, deployment, "web", tmp_path)
    vault = client(running, web.cert, web.mesh_ca)
    name = web.workload_secret_id
    v2 = vault.secrets.transit.encrypt_data(
        name, b64(b"secret"), key_version=2, mount_point="transit"
    )["data"]
    assert v2["ciphertext"].startswith("vault:v2:")
    assert v2["key_version"] == 2
    opened = vault.secrets.transit.decrypt_data(name, v2["ciphertext"], mount_point="transit")
    assert base64.b64decode(opened["data"]["plaintext"]) == b"secret"
    relabelled = v2["ciphertext"].replace("vault:v2:", "vault:v1:")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="message authentication failed"):
        vault.secrets.transit.decrypt_data(name, relabelled, mount_point="transit")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="versions start at 1"):
        vault.secrets.transit.decrypt_data(
            name, v2["ciphertext"].replace("vault:v2:", "vault:v0:"), mount_point="transit"
        )


def test_the_key_is_the_originals_derivation(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    """Key N of a name is the first 32 bytes of the workload secret of "N_<name>" (the
    original's `deriveEncryptionKey`): a ciphertext made from the seed alone opens."""
    web = workload(running.coordinator, deployment, "web", tmp_path)
    seed = SeedEngine(running.seed, running.salt)
    key = seed.workload_secret(f"1_{web.workload_secret_id}")[:32]
    nonce = bytes(12)
    made = AESGCM(key).encrypt(nonce, b"made elsewhere", b"context")
    ciphertext = "vault:v1:" + b64(nonce + made)
    opened = client(running, web.cert, web.mesh_ca).secrets.transit.decrypt_data(
        web.workload_secret_id, ciphertext, associated_data=b64(b"context"), mount_point="transit"
    )
    assert base64.b64decode(opened["data"]["plaintext"]) == b"made elsewhere"
    with pytest.raises(hvac.exceptions.InvalidRequest, match="message authentication failed"):
        client(running, web.cert, web.mesh_ca).secrets.transit.decrypt_data(
            web.workload_secret_id, ciphertext, associated_data=b64(b"other"), mount_point="transit"
        )


def test_what_is_not_served_is_refused_by_name(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    web = workload(running.coordinator, deployment, "web", tmp_path)
    vault = client(running, web.cert, web.mesh_ca)
    name = web.workload_secret_id
    with pytest.raises(hvac.exceptions.InvalidRequest, match="'batch_input' is not supported"):
        vault.secrets.transit.encrypt_data(
            name, b64(b"x"), batch_input=[{"plaintext": b64(b"y")}], mount_point="transit"
        )
    with pytest.raises(hvac.exceptions.InvalidRequest, match="'context' is not supported"):
        vault.secrets.transit.encrypt_data(
            name, b64(b"x"), context=b64(b"c"), mount_point="transit"
        )
    with pytest.raises(hvac.exceptions.InvalidPath, match="nothing to create, read, rotate"):
        vault.secrets.transit.read_key(name, mount_point="transit")
    with pytest.raises(hvac.exceptions.InvalidPath, match="nothing to create, read, rotate"):
        vault.secrets.transit.rotate_key(name, mount_point="transit")
    with pytest.raises(hvac.exceptions.InvalidPath, match="serves /v1/transit/encrypt"):
        vault.secrets.kv.v2.read_secret_version("anything")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="not valid base64"):
        vault.secrets.transit.encrypt_data(name, "not base64!", mount_point="transit")
