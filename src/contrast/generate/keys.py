"""Owner keys of a workspace: created once, reused afterwards, never overwritten.

`prepare_owner_keys` reads and checks every key and makes the missing ones in memory; only
`OwnerKeys.write_new` writes them. `generate` prepares its keys before it reads an image or
writes a file and writes the new ones with its other outputs, so that a key it refuses (garbage,
the wrong kind, a path that names nothing) leaves the workspace as it was: no seed share owner
key made for a deployment that never happens, no layer cache written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from contrast.atls.reportdata import public_key_der
from contrast.client.workspace import (
    generate_seedshare_owner_key,
    generate_workload_owner_key,
    load_seedshare_owner_public_key,
    load_workload_owner_key,
)
from contrast.files import stage, sync_directory
from contrast.generate.errors import OwnerKeyRefused
from contrast.manifest.ownership import owner_key_digest
from contrast.seed.shares import public_key_hex


@dataclass(frozen=True)
class NewKey:
    """A key `prepare_owner_keys` made, to be written to `path` (owner-only) on success."""

    path: Path
    pem: bytes = field(repr=False)  # a private key: never in a log or a message


@dataclass(frozen=True)
class OwnerKeys:
    workload_owner_digests: tuple[str, ...]
    seedshare_owner_public_keys: tuple[str, ...]
    new: tuple[NewKey, ...] = ()

    @property
    def created(self) -> tuple[Path, ...]:
        """Where the keys this run made go (`write_new`)."""
        return tuple(key.path for key in self.new)

    def write_new(self) -> tuple[Path, ...]:
        """Write the keys made in memory, owner-only; a file that appeared meanwhile is kept.

        Each key is linked into place from a synced temporary file, which fails rather than
        replaces: the manifest then names a key nobody holds, so that is refused.
        """
        for key in self.new:
            staged = stage(key.path, key.pem, mode=0o600)
            try:
                os.link(staged.temporary, key.path)
            except FileExistsError:
                raise OwnerKeyRefused(
                    f"{key.path} appeared while generate ran; it was not replaced",
                    hint="run generate again: it uses the key that is there now",
                ) from None
            except OSError as error:
                raise OwnerKeyRefused(f"cannot write {key.path}: {error.strerror}") from None
            finally:
                staged.discard()
            sync_directory(key.path.parent)
        return self.created


def prepare_owner_keys(
    workload_owner_keys: Sequence[Path],
    seedshare_owner_keys: Sequence[Path],
    *,
    create_missing: bool | tuple[bool, bool],
    disable_updates: bool,
) -> OwnerKeys:
    """Load and check the owner keys, making a missing one in memory only where
    `create_missing` says (for both kinds, or as (workload owner keys, seed share owner keys)).

    Nothing is written (`OwnerKeys.write_new` does that). The original creates keys only when
    the default path is used; a path the user named must exist, so a typo is an error rather
    than a new key nobody holds.
    """
    create_workload, create_seedshare = (
        create_missing if isinstance(create_missing, tuple) else (create_missing, create_missing)
    )
    new: list[NewKey] = []
    digests = []
    for path in workload_owner_keys:
        made = _made_for(path, create_workload, generate_workload_owner_key, new)
        key = load_workload_owner_key(path) if made is None else made
        if not isinstance(key, ec.EllipticCurvePrivateKey):  # one path named for both kinds
            raise OwnerKeyRefused(f"{path} is not an ECDSA key (workload owner keys are P-384)")
        digests.append(owner_key_digest(public_key_der(key.public_key())))
    seedshares = []
    for path in seedshare_owner_keys:
        made = _made_for(path, create_seedshare, generate_seedshare_owner_key, new)
        if made is None:
            public = load_seedshare_owner_public_key(path)
        elif isinstance(made, rsa.RSAPrivateKey):
            public = made.public_key()
        else:
            raise OwnerKeyRefused(f"{path} is not an RSA key (seed share owner keys are RSA-4096)")
        seedshares.append(public_key_hex(public))
    return OwnerKeys(
        () if disable_updates else tuple(sorted(digests)), tuple(sorted(seedshares)), tuple(new)
    )


def ensure_owner_keys(
    workload_owner_keys: Sequence[Path],
    seedshare_owner_keys: Sequence[Path],
    *,
    create_missing: bool | tuple[bool, bool],
    disable_updates: bool,
) -> OwnerKeys:
    """`prepare_owner_keys`, then the new keys written: for callers that write nothing else."""
    keys = prepare_owner_keys(
        workload_owner_keys,
        seedshare_owner_keys,
        create_missing=create_missing,
        disable_updates=disable_updates,
    )
    keys.write_new()
    return keys


def _made_for(
    path: Path, create: bool, make: Callable[[], bytes], new: list[NewKey]
) -> PrivateKeyTypes | None:
    """A key made for `path` (and listed in `new`), or None where `path` is to be read.

    A path named twice gets one key. A path that is there, even as a dangling link, is read,
    and so is a missing one that is not to be created: its error then names it.
    """
    for made in new:
        if made.path == path:
            return _private_key(made.pem)
    if not create or os.path.lexists(path):
        return None
    pem = make()
    new.append(NewKey(path, pem))
    return _private_key(pem)


def _private_key(pem: bytes) -> PrivateKeyTypes:
    # A key made here a moment ago: OpenSSL's RSA consistency check (0.25 s) adds nothing.
    return serialization.load_pem_private_key(
        pem, password=None, unsafe_skip_rsa_key_validation=True
    )
