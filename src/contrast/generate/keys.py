"""Owner keys of a workspace: created once, reused afterwards, never overwritten."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contrast.atls.reportdata import public_key_der
from contrast.client.workspace import (
    generate_seedshare_owner_key,
    generate_workload_owner_key,
    load_seedshare_owner_public_key,
    load_workload_owner_key,
)
from contrast.files import write_atomically
from contrast.manifest.ownership import owner_key_digest
from contrast.seed.shares import public_key_hex


@dataclass(frozen=True)
class OwnerKeys:
    workload_owner_digests: tuple[str, ...]
    seedshare_owner_public_keys: tuple[str, ...]
    created: tuple[Path, ...]


def ensure_owner_keys(
    workload_owner_keys: Sequence[Path],
    seedshare_owner_keys: Sequence[Path],
    *,
    create_missing: bool | tuple[bool, bool],
    disable_updates: bool,
) -> OwnerKeys:
    """Load the owner keys, creating a missing one (0600) only where `create_missing` says
    (for both kinds, or as (workload owner keys, seed share owner keys)).

    The original creates keys only when the default path is used; a path the user named must
    exist, so a typo is an error rather than a new key nobody holds.
    """
    create_workload, create_seedshare = (
        create_missing if isinstance(create_missing, tuple) else (create_missing, create_missing)
    )
    created = []
    for path, make, create in [
        *((p, generate_workload_owner_key, create_workload) for p in workload_owner_keys),
        *((p, generate_seedshare_owner_key, create_seedshare) for p in seedshare_owner_keys),
    ]:
        if not path.exists() and create:
            write_atomically(path, make(), mode=0o600)
            created.append(path)
    digests = (
        ()
        if disable_updates
        else tuple(
            sorted(
                owner_key_digest(public_key_der(load_workload_owner_key(p).public_key()))
                for p in workload_owner_keys
            )
        )
    )
    seedshares = tuple(
        sorted(
            public_key_hex(load_seedshare_owner_public_key(path)) for path in seedshare_owner_keys
        )
    )
    return OwnerKeys(digests, seedshares, tuple(created))
