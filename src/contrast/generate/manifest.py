"""The manifest `generate` writes: policies from the workloads, reference values per platform.

An existing manifest is the starting point, so that reference values an operator filled in
(bare-metal TCB, chip ids) survive a re-run; only platforms that have no entry yet get defaults,
and the policies are recomputed from the resources every time. The manifest is the one type of
`contrast.manifest.model`, which also writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contrast.generate.errors import GenerateError
from contrast.generate.keys import OwnerKeys
from contrast.manifest.model import Manifest, PolicyEntry, ReferenceValues, Role
from contrast.platforms import Platform

ReferenceProvider = Callable[[Platform], tuple[ReferenceValues, list[str]]]


@dataclass(frozen=True)
class WorkloadIdentity:
    policy_hash: str
    name: str
    workload_secret_id: str
    role: str
    source: str  # "file: Kind/name", for messages


def policies(identities: Sequence[WorkloadIdentity]) -> dict[str, PolicyEntry]:
    """`Policies`: one entry per policy hash; two different workloads with one hash are refused."""
    entries: dict[str, PolicyEntry] = {}
    owners: dict[str, WorkloadIdentity] = {}
    for identity in identities:
        entry = PolicyEntry((identity.name, "*"), identity.workload_secret_id, _role(identity))
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


def _role(identity: WorkloadIdentity) -> Role:
    try:
        return Role(identity.role)
    except ValueError:
        # Before, such a manifest was written and only `contrast set` refused it.
        raise GenerateError(
            f"{identity.source}: pod-role {identity.role!r} is not a role in the manifest",
            hint=f'a confidential pod has no pod-role or "{Role.COORDINATOR}"',
        ) from None


def reference_values(
    existing: ReferenceValues,
    platforms: Sequence[Platform],
    provider: ReferenceProvider,
) -> tuple[ReferenceValues, list[str]]:
    """Existing entries kept; platforms without an entry get the provider's defaults."""
    snp, tdx = list(existing.snp), list(existing.tdx)
    present = {entry.platform.lower() for entry in existing.entries}
    missing: list[str] = []
    for platform in platforms:
        if platform.display_name.lower() in present:
            continue
        values, notes = provider(platform)
        snp.extend(values.snp)
        tdx.extend(values.tdx)
        missing.extend(notes)
    return ReferenceValues(tuple(snp), tuple(tdx)), missing


def manifest(
    identities: Sequence[WorkloadIdentity],
    values: ReferenceValues,
    keys: OwnerKeys,
    *,
    seedshare_threshold: int = 1,
) -> Manifest:
    """The manifest of these workloads, with `reference_values()` and the owners' keys."""
    return Manifest(
        policies(identities),
        values,
        keys.workload_owner_digests,
        keys.seedshare_owner_public_keys,
        seedshare_threshold,
    )
