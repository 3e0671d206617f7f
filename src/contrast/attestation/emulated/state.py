"""Files of the emulated TEE's state directory: written atomically, keys owner-only."""

from contrast.files import read_private_key, write_atomically, write_private_key

__all__ = ["read_private_key", "write_atomically", "write_private_key"]
