"""The manifest `generate` writes: policies from the workloads, reference values per platform.

An existing manifest is the starting point, so that reference values an operator filled in
(bare-metal TCB, chip ids) survive a re-run; only platforms that have no entry yet get defaults,
and the policies are recomputed from the resources every time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contrast.generate.errors import GenerateError
from contrast.generate.keys import OwnerKeys
from contrast.platforms import Platform

ReferenceProvider = Callable[[Platform], tuple[Mapping[str, list[dict[str, Any]]], list[str]]]


@dataclass(frozen=True)
class WorkloadIdentity:
    policy_hash: str
    name: str
    workload_secret_id: str
    role: str
    source: str  # "file: Kind/name", for messages


def policies(identities: Sequence[WorkloadIdentity]) -> dict[str, dict[str, Any]]:
    """`Policies`: one entry per policy hash; two different workloads with one hash are refused."""
    entries: dict[str, dict[str, Any]] = {}
    owners: dict[str, WorkloadIdentity] = {}
    for identity in identities:
        entry: dict[str, Any] = {"SANs": [identity.name, "*"]}
        if identity.workload_secret_id:
            entry["WorkloadSecretID"] = identity.workload_secret_id
        if identity.role:
            entry["Role"] = identity.role
        previous = owners.get(identity.policy_hash)
        if previous is not None and entries[identity.policy_hash] != entry:
            raise GenerateError(
                f"{identity.source} and {previous.source} have the same policy"
                f" ({identity.policy_hash[:16]}…) but different names or secrets",
                hint="pods with one policy are indistinguishable; give them different content"
                " or the same workload-secret-id",
            )
        entries[identity.policy_hash] = entry
        owners[identity.policy_hash] = identity
    return dict(sorted(entries.items()))


def reference_values(
    existing: Mapping[str, Any],
    platforms: Sequence[Platform],
    provider: ReferenceProvider,
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Existing entries kept; platforms without an entry get the provider's defaults."""
    result: dict[str, list[dict[str, Any]]] = {
        kind: [dict(entry) for entry in existing.get(kind, [])] for kind in ("snp", "tdx")
    }
    present = {
        str(entry.get("Platform", "")).lower() for entries in result.values() for entry in entries
    }
    missing: list[str] = []
    for platform in platforms:
        if platform.display_name.lower() in present:
            continue
        values, notes = provider(platform)
        for kind, entries in values.items():
            result.setdefault(kind, []).extend(entries)
        missing.extend(notes)
    return {kind: entries for kind, entries in result.items() if entries}, missing


def manifest_document(
    identities: Sequence[WorkloadIdentity],
    values: Mapping[str, list[dict[str, Any]]],
    keys: OwnerKeys,
    *,
    seedshare_threshold: int = 1,
) -> dict[str, Any]:
    """The manifest of these workloads, with `reference_values()` and the owners' keys.

    `SeedshareThreshold` is written only above 1, so that such manifests stay the original's.
    """
    document: dict[str, Any] = {
        "Policies": policies(identities),
        "ReferenceValues": dict(values),
        "WorkloadOwnerKeyDigests": list(keys.workload_owner_digests),
        "SeedshareOwnerPubKeys": list(keys.seedshare_owner_public_keys),
    }
    if seedshare_threshold > 1:
        document["SeedshareThreshold"] = seedshare_threshold
    return document


def to_bytes(document: Mapping[str, Any]) -> bytes:
    """2-space indent and a trailing newline, as the original writes `manifest.json`."""
    return json.dumps(document, indent=2).encode() + b"\n"
