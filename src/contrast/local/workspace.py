"""The demo's workspace: what `contrast generate` would produce, for emulated workloads.

Each workload is a Pod YAML whose initdata annotation carries its (demo) policy; its hash is the
workload's identity, as on a real cluster. The manifest admits the Coordinator and the listed
workloads on the emulated platform only, trusting the emulated TEE's own root.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contrast.atls.issuers import TeeKind
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.attestation.emulated.tdx import EmulatedTdx
from contrast.client.workspace import (
    MANIFEST,
    SEEDSHARE_OWNER_KEY,
    WORKLOAD_OWNER_KEY,
    Workspace,
)
from contrast.generate.keys import ensure_owner_keys
from contrast.manifest.emulated import (
    emulated_snp_reference_values,
    emulated_tdx_reference_values,
)
from contrast.manifest.model import Manifest, PolicyEntry, ReferenceValues, Role
from contrast.policy.initdata import ANNOTATION, Initdata, encode_annotation, policy_hash

RESOURCES = "resources"


@dataclass(frozen=True)
class DemoWorkload:
    name: str
    role: str = ""

    def initdata(self) -> bytes:
        policy = (
            "package agent_policy\n\n"
            f"# Demo policy of {self.name}: the local demo runs no Kata agent to enforce it.\n"
            "default AllowRequestsFailingPolicy := true\n"
        )
        return Initdata({"policy.rego": policy}).to_toml()

    @property
    def policy_hash(self) -> bytes:
        return policy_hash(self.initdata())

    def pod_yaml(self) -> str:
        return (
            "apiVersion: v1\nkind: Pod\nmetadata:\n"
            f"  name: {self.name}\n  namespace: default\n  annotations:\n"
            f"    {ANNOTATION}: {encode_annotation(self.initdata())}\n"
            "spec:\n  runtimeClassName: contrast-cc\n"
            f"  containers:\n    - name: {self.name}\n      image: demo/{self.name}\n"
        )


def emulated_reference_values(kind: TeeKind, tee_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """`ReferenceValues` admitting the emulated TEE in `tee_dir` (creating it if needed)."""
    if kind is TeeKind.EMULATED_TDX:
        return {"tdx": [emulated_tdx_reference_values(EmulatedTdx(tee_dir))]}
    return {"snp": [emulated_snp_reference_values(EmulatedSnp(tee_dir))]}


# The demo's seed share owners: the workspace's own key and two more; any two of the three
# recover the seed (a SeedshareThreshold of 2, beyond the original's one-of-N).
SEEDSHARE_OWNERS = (SEEDSHARE_OWNER_KEY, "seedshare-owner-2.pem", "seedshare-owner-3.pem")
SEEDSHARE_THRESHOLD = 2


def write_workspace(
    root: Path,
    reference_values: Mapping[str, list[dict[str, Any]]],
    workloads: Sequence[DemoWorkload],
    *,
    seedshare_owners: Sequence[str] = (SEEDSHARE_OWNER_KEY,),
    seedshare_threshold: int = 1,
) -> tuple[Workspace, Manifest]:
    """A workspace for `workloads`: by default one seed share owner, as the original has."""
    workspace = Workspace(root)
    keys = ensure_owner_keys(
        [workspace.path(WORKLOAD_OWNER_KEY)],
        [workspace.path(name) for name in seedshare_owners],
        create_missing=True,
        disable_updates=False,
    )
    for workload in workloads:
        workspace.write_public(f"{RESOURCES}/{workload.name}.yml", workload.pod_yaml().encode())
    manifest = Manifest(
        {
            workload.policy_hash.hex(): PolicyEntry(
                (workload.name, "*"), f"core/v1/Pod/default/{workload.name}", Role(workload.role)
            )
            for workload in workloads
        },
        ReferenceValues.from_json(dict(reference_values)),
        keys.workload_owner_digests,
        keys.seedshare_owner_public_keys,
        seedshare_threshold,
    )
    manifest_bytes = manifest.to_bytes()
    workspace.write_public(MANIFEST, manifest_bytes)
    return workspace, Manifest.from_bytes(manifest_bytes)
