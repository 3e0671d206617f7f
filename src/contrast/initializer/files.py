"""What the Initializer leaves in `/contrast` for the workload (paths and modes as the original)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.files import write_atomically

TLS_DIR = "tls-config"
SECRETS_DIR = "secrets"
MESH_CA = f"{TLS_DIR}/mesh-ca.pem"
CERT_CHAIN = f"{TLS_DIR}/certChain.pem"
KEY = f"{TLS_DIR}/key.pem"
ROOT_CA = f"{TLS_DIR}/coordinator-root-ca.pem"
WORKLOAD_SECRET = f"{SECRETS_DIR}/workload-secret-seed"

PUBLIC = 0o444
PRIVATE = 0o400


@dataclass(frozen=True)
class WorkloadFiles:
    mesh_ca: bytes
    cert_chain: bytes
    root_ca: bytes
    key: ec.EllipticCurvePrivateKey
    workload_secret: bytes | None

    def write(self, directory: Path) -> list[Path]:
        """Write every file atomically; keys and secrets readable by the owner only."""
        key_pem = self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        entries: list[tuple[str, bytes, int]] = [
            (MESH_CA, self.mesh_ca, PUBLIC),
            (CERT_CHAIN, self.cert_chain, PUBLIC),
            (ROOT_CA, self.root_ca, PUBLIC),
            (KEY, key_pem, PRIVATE),
        ]
        if self.workload_secret is not None:
            entries.append((WORKLOAD_SECRET, self.workload_secret.hex().encode(), PRIVATE))
        written = []
        for name, data, mode in entries:
            path = directory / name
            write_atomically(path, data, mode=mode)
            written.append(path)
        return written
