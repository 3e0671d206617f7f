"""Files that must survive a crash: written atomically, keys and secrets owner-only."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes


def write_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.

    The temporary file is created with `mode` from the start, so a key is never readable by
    others, not even for a moment.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(descriptor, mode)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_private_key(path: Path, key: PrivateKeyTypes) -> None:
    """Store a private key as unencrypted PKCS#8 PEM, readable by the owner only."""
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_atomically(path, pem, mode=0o600)


def read_private_key(path: Path) -> PrivateKeyTypes:
    """Load a key written by `write_private_key`."""
    return serialization.load_pem_private_key(path.read_bytes(), password=None)
