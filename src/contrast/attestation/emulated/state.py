"""Files of the emulated TEE's state directory: written atomically, keys owner-only, read within
a bound (the directory is a path the user names: `--emulated-tee`, `--emulated-roots`)."""

from pathlib import Path

from contrast.boundedfile import read_bounded
from contrast.files import read_private_key, write_atomically, write_private_key

__all__ = ["read_private_key", "read_state", "write_atomically", "write_private_key"]

# A certificate, chain or key of the emulated TEE is a few KiB.
STATE_FILE_MAX_BYTES = 1 << 20


def read_state(path: Path) -> bytes:
    """A file of the state directory, refused above `STATE_FILE_MAX_BYTES`."""
    return read_bounded(
        path,
        STATE_FILE_MAX_BYTES,
        what="the emulated TEE's file",
        hint="pass the directory the emulated TEE was created in",
    )
