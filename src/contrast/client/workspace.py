"""The files of a Contrast workspace, with the original's names.

`generate` writes the manifest and the owner keys; `set` adds the CA certificates and, on the
first set, `seed-shares.json`; `verify` fills `verify/`. Keys and seed shares are owner-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.boundedfile import read_bounded
from contrast.client.errors import ClientError
from contrast.files import write_all_atomically, write_atomically

MANIFEST = "manifest.json"
WORKLOAD_OWNER_KEY = "workload-owner.pem"
SEEDSHARE_OWNER_KEY = "seedshare-owner.pem"
SEED_SHARES = "seed-shares.json"
ROOT_CA = "coordinator-root-ca.pem"
MESH_CA = "mesh-ca.pem"
VERIFY_DIR = "verify"
LATEST_TRANSITION = "latest-transition"

# An owner key is one PEM private key: RSA-4096 is 3.2 KiB, RSA-16384 about 12 KiB.
PEM_MAX_BYTES = 64 << 10


class WorkspaceError(ClientError):
    """A workspace file is missing or unreadable."""


def read_file(path: Path, what: str, max_bytes: int, *, hint: str | None = None) -> bytes:
    """The bytes of a file the user named or the workspace holds, refused above `max_bytes`
    (`contrast.boundedfile`): `--share /dev/zero` is one line, not a MemoryError."""
    try:
        return read_bounded(path, max_bytes, what=f"the {what}", hint=hint)
    except OSError as error:
        raise WorkspaceError(f"cannot read {what} {path}: {error.strerror}", hint=hint) from None


@dataclass(frozen=True)
class Workspace:
    root: Path

    def path(self, name: str) -> Path:
        return self.root / name

    @property
    def verify_dir(self) -> Path:
        return self.root / VERIFY_DIR

    def write_public(self, name: str, data: bytes) -> Path:
        return self._write(name, data, 0o644)

    def write_private(self, name: str, data: bytes) -> Path:
        return self._write(name, data, 0o600)

    def write_all_public(self, files: Sequence[tuple[str, bytes]]) -> list[Path]:
        """`write_public` of each (name, data), each file atomic, with one sync for all of them
        (`write_all_atomically`): `verify` writes one initdata file per workload."""
        paths = [(self.path(name), data) for name, data in files]
        try:
            write_all_atomically(paths, mode=0o644)
        except OSError as error:
            raise WorkspaceError(
                f"cannot write {len(paths)} files in {self.root}: {error.strerror or error}",
                hint="check that the workspace directory is writable and nothing is in the way",
            ) from None
        return [path for path, _ in paths]

    def _write(self, name: str, data: bytes, mode: int) -> Path:
        path = self.path(name)
        try:
            write_atomically(path, data, mode=mode)
        except OSError as error:
            raise WorkspaceError(
                f"cannot write {path}: {error.strerror or error}",
                hint="check that the workspace directory is writable and nothing is in the way",
            ) from None
        return path


def load_workload_owner_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = _load_private_key(path, "workload owner key")
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise WorkspaceError(f"{path} is not an ECDSA key (workload owner keys are P-384)")
    return key


def load_seedshare_owner_key(path: Path) -> rsa.RSAPrivateKey:
    key = _load_private_key(path, "seed share owner key")
    if not isinstance(key, rsa.RSAPrivateKey):
        raise WorkspaceError(f"{path} is not an RSA key (seed share owner keys are RSA-4096)")
    return key


def load_seedshare_owner_public_key(path: Path) -> rsa.RSAPublicKey:
    """The public half of a seed share owner key, for the manifest.

    OpenSSL's consistency check of an RSA-4096 private key costs 0.25 s, a quarter of a
    `generate` at 100 workloads, and guards only operations with the private key. The public
    key (n, e) is read from the same PEM either way, so it is skipped here.
    """
    key = _load_private_key(path, "seed share owner key", validate=False)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise WorkspaceError(f"{path} is not an RSA key (seed share owner keys are RSA-4096)")
    return key.public_key()


def _load_private_key(path: Path, what: str, *, validate: bool = True) -> object:
    data = read_file(
        path, what, PEM_MAX_BYTES, hint="pass the PEM key file contrast generate created"
    )
    try:
        return serialization.load_pem_private_key(
            data, password=None, unsafe_skip_rsa_key_validation=not validate
        )
    except (ValueError, TypeError) as error:
        raise WorkspaceError(f"{path} is not an unencrypted PEM private key: {error}") from None


def generate_workload_owner_key() -> bytes:
    """A new P-384 owner key as PEM `EC PRIVATE KEY`, the original's format."""
    key = ec.generate_private_key(ec.SECP384R1())
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def generate_seedshare_owner_key() -> bytes:
    """A new RSA-4096 seed share key as PEM `RSA PRIVATE KEY`, the original's format."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=4096)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
