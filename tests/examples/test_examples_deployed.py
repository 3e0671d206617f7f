"""The examples deployed on the emulated platform as the demo runs workloads.

For each example: `generate` (emulated SNP, the images replaced as in test_examples), a
Coordinator process on the emulated TEE with the policy hash of its generated pod, `set` with
the generated manifest, and for every pod of the example its Initializer as a process whose
emulated evidence carries that pod's own policy hash (the digest of its generated initdata, what
the emulated runtime fixes for a pod): each gets its mesh certificate with the manifest's SANs
and its workload secret. The same pod with anything of its policy changed (the Vault's seal
pointed elsewhere) gets nothing. For the Vault, its certificate then makes the calls OpenBao's
`seal "transit"` makes against the Coordinator's transit engine, with the key name of its
configuration (its workload secret ID); the client's certificate is refused that key.

Not run here: the apps themselves (upstream's images are out of reach, see test_examples), and
the encrypted volume, which needs device-mapper (tests/initializer covers the key).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hvac
import hvac.exceptions
import pytest
from cryptography import x509

from contrast.client import operations
from contrast.client.workspace import MANIFEST, Workspace
from contrast.local.processes import Processes, free_port, wait_for_port
from contrast.policy.initdata import ANNOTATION, decode_annotation, policy_hash
from tests.examples.conftest import generated
from tests.generate.conftest import GenerateWorkspace

PODS = {
    "emojivoto": ("emoji", "voting", "web", "vote-bot"),
    "mysql": ("mysql-backend", "mysql-client"),
    "vault": ("vault", "vault-client"),
}
TEE = "emulated-snp"


def _pod_annotations(workspace: GenerateWorkspace, file: str) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"]
        for d in workspace.documents(file)
        if d.get("kind") in ("Deployment", "StatefulSet")
    }


def _hash(annotation: str) -> str:
    return policy_hash(decode_annotation(annotation)).hex()


class Deployed:
    """A Coordinator process with the example's manifest set; Initializers run on demand."""

    def __init__(self, workspace: GenerateWorkspace, processes: Processes) -> None:
        self.workspace, self.processes = workspace, processes
        self.tee_state = workspace.root / "emulated-tee"
        self.user, self.mesh, self.http, self.transit = (free_port() for _ in range(4))
        coordinator = _pod_annotations(workspace, "coordinator.yml")["coordinator"]
        process = processes.start(
            "coordinator",
            ["-m", "contrast", "coordinator", *self.tee(_hash(coordinator[ANNOTATION])),
             "--state-dir", str(workspace.root / "coordinator-state"), "--listen", "127.0.0.1",
             "--user-api-port", str(self.user), "--mesh-api-port", str(self.mesh),
             "--http-port", str(self.http), "--transit-port", str(self.transit)],
        )  # fmt: skip
        for port in (self.user, self.mesh, self.transit):
            wait_for_port(port, timeout=60, process=process)
        target = operations.Target(f"127.0.0.1:{self.user}", workspace.root / MANIFEST)
        operations.set_manifest(target, Workspace(workspace.root), workspace.resources)

    def tee(self, hash_hex: str) -> list[str]:
        return ["--tee", TEE, "--tee-state", str(self.tee_state), "--policy-hash", hash_hex]

    def initializer(self, name: str, hash_hex: str) -> tuple[int, str, Path]:
        output = self.workspace.root / "pods" / name
        result = self.processes.run(
            f"initializer-{name}",
            ["-m", "contrast", "initializer", *self.tee(hash_hex),
             "--coordinator", f"127.0.0.1:{self.mesh}", "--output", str(output),
             "--deadline", "20"],
            timeout=90,
        )  # fmt: skip
        return result.returncode, result.stderr, output


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path / "logs")
    try:
        yield running
    finally:
        running.stop_all()


def _sans(certificate: Path) -> set[str]:
    leaf = x509.load_pem_x509_certificates(certificate.read_bytes())[0]
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n.value) for n in names}


@pytest.mark.parametrize("example", sorted(PODS))
def test_every_pod_of_the_example_gets_its_certificate_and_secret(
    workspace: GenerateWorkspace, processes: Processes, example: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    assert generated(workspace, example) == 0, capsys.readouterr().err
    deployed = Deployed(workspace, processes)
    entries = workspace.manifest()["Policies"]
    for name, pod in _pod_annotations(workspace, f"{example}.yml").items():
        hash_hex = _hash(pod[ANNOTATION])
        code, err, files = deployed.initializer(name, hash_hex)
        assert code == 0, err
        assert _sans(files / "tls-config" / "certChain.pem") >= set(entries[hash_hex]["SANs"])
        assert (
            len((files / "secrets" / "workload-secret-seed").read_text().strip()) == 128
        )  # 64 bytes, hex
    assert set(_pod_annotations(workspace, f"{example}.yml")) == set(PODS[example])
    capsys.readouterr()


def test_the_vault_unseals_through_the_coordinator_and_a_changed_vault_cannot(
    workspace: GenerateWorkspace, processes: Processes, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generated(workspace, "vault") == 0, capsys.readouterr().err
    deployed = Deployed(workspace, processes)
    pods = _pod_annotations(workspace, "vault.yml")
    vault_hash = _hash(pods["vault"][ANNOTATION])
    code, err, vault = deployed.initializer("vault", vault_hash)
    assert code == 0, err
    code, err, client_files = deployed.initializer(
        "vault-client", _hash(pods["vault-client"][ANNOTATION])
    )
    assert code == 0, err

    def transit(files: Path) -> hvac.Client:
        tls = files / "tls-config"
        return hvac.Client(
            url=f"https://localhost:{deployed.transit}",
            cert=(str(tls / "certChain.pem"), str(tls / "key.pem")),
            verify=str(tls / "mesh-ca.pem"),
            timeout=20,
        )

    # What seal "transit" does with key_name = "vault_unsealing": its start-up encrypt, then
    # the root key sealed and opened again.
    seal = transit(vault)
    root_key = bytes(range(32))
    sealed = seal.secrets.transit.encrypt_data(
        "vault_unsealing", base64.b64encode(root_key).decode(), mount_point="transit"
    )["data"]["ciphertext"]
    assert sealed.startswith("vault:v1:")
    opened = seal.secrets.transit.decrypt_data("vault_unsealing", sealed, mount_point="transit")
    assert base64.b64decode(opened["data"]["plaintext"]) == root_key
    # Attack: another workload of the deployment asks for the Vault's key.
    with pytest.raises(hvac.exceptions.Forbidden):
        transit(client_files).secrets.transit.decrypt_data(
            "vault_unsealing", sealed, mount_point="transit"
        )

    # Attack: the host starts the Vault pod with its seal pointed at a transit engine of its
    # own; the pod's initdata, and so its evidence's policy hash, is no longer the manifest's.
    initdata = decode_annotation(pods["vault"][ANNOTATION])
    rogue = initdata.replace(b"https://coordinator:8200", b"https://attacker:8200")
    assert rogue != initdata
    code, err, _ = deployed.initializer("vault-rogue", policy_hash(rogue).hex())
    assert code != 0
    assert "PERMISSION_DENIED" in err
    capsys.readouterr()
