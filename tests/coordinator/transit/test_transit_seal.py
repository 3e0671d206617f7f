"""Vault's own `seal "transit"` code against the transit engine, configured as the original's
Vault how-to configures it (docs/howto/vault: the seal stanza with the Initializer's files).

tools/transitseal runs go-kms-wrapping's transit wrapper as Vault does: SetConfig with the stanza
(its test encrypt), then the root key encrypted at initialisation and decrypted at every start.
"""

from __future__ import annotations

from pathlib import Path

from tests.coordinator.conftest import Deployment
from tests.coordinator.transit.conftest import Running, Workload, serve, workload
from tests.coordinator.transit.seal import run_seal

ROOT_KEY = bytes(range(32))


def stanza(port: int, files: Workload, key_name: str, **extra: str) -> dict[str, str]:
    """The how-to's seal stanza, with this server's address and these files."""
    return {
        "address": f"https://localhost:{port}",
        "disable_renewal": "true",
        "key_name": key_name,
        "mount_path": "transit/",
        "tls_ca_cert": files.mesh_ca,
        "tls_client_cert": files.cert[0],
        "tls_client_key": files.cert[1],
        **extra,
    }


def test_vaults_seal_initialises_and_unseals_after_a_coordinator_restart(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    vault = workload(running.coordinator, deployment, "web", tmp_path)
    config = stanza(running.server.port, vault, vault.workload_secret_id)
    initialised = run_seal(config, plaintext=ROOT_KEY)
    assert initialised["key_id"] == "v1"
    assert initialised["ciphertext"].startswith("vault:v1:")
    # Vault restarts while the Coordinator restarted too: another process on the same history,
    # recovered with the seed; the seal's next start decrypts the stored root key.
    restarted = deployment.coordinator()
    restarted.recover(running.seed, running.salt)
    server = serve(restarted)
    try:
        unsealed = run_seal(
            stanza(server.port, vault, vault.workload_secret_id),
            ciphertext=initialised["ciphertext"],
        )
    finally:
        server.stop()
    assert unsealed["plaintext"] == "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def test_vaults_seal_with_a_token_and_renewal_still_starts(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    """With a token and renewal on, the seal first calls auth/token/renew-self; the Coordinator
    does not serve it (404) and the seal turns renewal off, as it does against a Vault."""
    vault = workload(running.coordinator, deployment, "web", tmp_path)
    config = stanza(
        running.server.port, vault, vault.workload_secret_id, disable_renewal="false", token="t"
    )
    assert run_seal(config, plaintext=ROOT_KEY)["key_id"] == "v1"


def test_vaults_seal_with_another_workloads_key_name_does_not_start(
    running: Running, deployment: Deployment, tmp_path: Path
) -> None:
    """Attack: a Vault pod configured with another workload's key name (to unseal that Vault's
    storage) fails at the seal's start-up test encrypt."""
    thief = workload(running.coordinator, deployment, "web", tmp_path / "web")
    victim = workload(running.coordinator, deployment, "client", tmp_path / "client")
    answer = run_seal(stanza(running.server.port, thief, victim.workload_secret_id))
    assert "Code: 403" in answer["error"]
    assert "is not this workload's" in answer["error"]


def test_vaults_seal_before_the_manifest_is_set_does_not_start(
    deployment: Deployment, tmp_path: Path
) -> None:
    """Without a manifest the seal cannot verify the Coordinator (no mesh CA yet): it refuses
    the stand-in certificate, even if handed a mesh CA of some other Coordinator."""
    elsewhere = deployment.coordinator()
    elsewhere.set_manifest(deployment.manifest(("coordinator", "web")), deployment.documents())
    files = workload(elsewhere, deployment, "web", tmp_path / "files")
    fresh = Deployment(
        deployment.tee, deployment.owner, deployment.seedshare, deployment.policies, tmp_path / "s"
    )
    server = serve(fresh.coordinator())
    try:
        answer = run_seal(stanza(server.port, files, files.workload_secret_id))
    finally:
        server.stop()
    assert "certificate" in answer["error"]
