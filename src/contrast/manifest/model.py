"""The manifest's JSON format, as the original writes it (`internal/manifest/manifest.go`).

Field names are the original's (`Policies`, `ReferenceValues`, `WorkloadOwnerKeyDigests`,
`SeedshareOwnerPubKeys`), so manifests move between the two implementations. The bytes of a
manifest are what the history stores and the Coordinator compares, so `to_bytes()` is canonical:
2-space indent, trailing newline, as `contrast generate` writes it.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contrast.boundedjson import JsonInputError, load
from contrast.manifest.errors import ManifestError
from contrast.manifest.limits import MANIFEST_LIMITS
from contrast.seed.shares import SeedShareError, load_public_key_hex
from contrast.seed.threshold import MAX_OWNERS

HASH_HEX = re.compile(r"^[0-9a-f]{64}$")


class Role(StrEnum):
    NONE = ""
    COORDINATOR = "coordinator"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class PolicyEntry(_Model):
    """What a workload with this policy hash gets: SANs, a workload secret, a role."""

    sans: tuple[str, ...] = Field(alias="SANs")
    workload_secret_id: str = Field(default="", alias="WorkloadSecretID")
    role: Role = Field(default=Role.NONE, alias="Role")


class ReferenceValueEntries(_Model):
    """The shape of `ReferenceValues`: entries per TEE kind, each a JSON object.

    Entries stay JSON objects here; `contrast.manifest.verifier` turns them into the
    attestation package's typed reference values, so this model does not depend on them.
    """

    snp: tuple[dict[str, Any], ...] = ()
    tdx: tuple[dict[str, Any], ...] = ()


class ReferenceValues(ReferenceValueEntries):
    """Per-platform reference values; a workload passes if any entry accepts its evidence."""

    @model_validator(mode="after")
    def _not_empty(self) -> ReferenceValues:
        if not self.snp and not self.tdx:
            raise ValueError("needs at least one snp or tdx entry")
        return self


class ManifestDraft(_Model):
    """The manifest's fields and their formats, none of them required.

    What `contrast generate` starts from: an operator may write only the reference values
    before the first run, but a file with other fields, or fields of another shape, is not a
    manifest, and generate must not replace it.
    """

    policies: dict[str, PolicyEntry] = Field(default_factory=dict, alias="Policies")
    reference_values: ReferenceValueEntries = Field(
        default_factory=ReferenceValueEntries, alias="ReferenceValues"
    )
    workload_owner_key_digests: tuple[str, ...] = Field(default=(), alias="WorkloadOwnerKeyDigests")
    seedshare_owner_pub_keys: tuple[str, ...] = Field(default=(), alias="SeedshareOwnerPubKeys")
    # How many seed share owners recover the seed together (absent: 1, each alone, as the
    # original). It is part of the manifest, so the Coordinator's attested manifest fixes it.
    seedshare_threshold: int = Field(default=1, alias="SeedshareThreshold")

    @model_validator(mode="after")
    def _threshold(self) -> Self:
        threshold, owners = self.seedshare_threshold, len(self.seedshare_owner_pub_keys)
        if threshold < 1 or threshold > max(owners, 1) or threshold > MAX_OWNERS:
            raise ValueError(
                f"SeedshareThreshold {threshold} needs 1 ≤ threshold ≤ the {owners} seed share"
                f" owner keys (at most {MAX_OWNERS})"
            )
        if threshold > 1 and len(set(self.seedshare_owner_pub_keys)) != owners:
            raise ValueError(
                "SeedshareOwnerPubKeys lists a key twice: its owner would hold two shares of a"
                " threshold"
            )
        return self

    @field_validator("policies")
    @classmethod
    def _policy_hashes(cls, policies: dict[str, PolicyEntry]) -> dict[str, PolicyEntry]:
        for policy_hash in policies:
            if not HASH_HEX.fullmatch(policy_hash):
                raise ValueError(
                    f"key {policy_hash!r} is not a policy hash (64 lower-case hex characters)"
                )
        return policies

    @field_validator("workload_owner_key_digests")
    @classmethod
    def _owner_digests(cls, digests: tuple[str, ...]) -> tuple[str, ...]:
        for value in digests:
            if not HASH_HEX.fullmatch(value):
                raise ValueError(f"{value!r} is not a SHA-256 digest (64 lower-case hex)")
        return digests

    @field_validator("seedshare_owner_pub_keys")
    @classmethod
    def _seedshare_keys(cls, keys: tuple[str, ...]) -> tuple[str, ...]:
        for value in keys:
            try:
                load_public_key_hex(value)
            except SeedShareError as error:
                raise ValueError(f"{value[:16]}…: {error}") from None
        return keys

    @classmethod
    def from_document(cls, document: Any) -> Self:
        """Validate parsed JSON; a ManifestError names the first problem."""
        try:
            return cls.model_validate(document)
        except ValidationError as error:
            raise ManifestError(f"invalid manifest: {_describe(error)}") from None


class Manifest(ManifestDraft):
    """A whole manifest: policies with a Coordinator among them, and reference values."""

    policies: dict[str, PolicyEntry] = Field(alias="Policies")
    reference_values: ReferenceValues = Field(alias="ReferenceValues")

    @model_validator(mode="after")
    def _has_coordinator(self) -> Manifest:
        if not self.coordinator_policy_hashes:
            raise ValueError('no policy has Role "coordinator": the Coordinator must be listed')
        return self

    @property
    def coordinator_policy_hashes(self) -> list[str]:
        return [h for h, entry in self.policies.items() if entry.role is Role.COORDINATOR]

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        try:
            document = load(data, MANIFEST_LIMITS, what="the manifest")
        except JsonInputError as error:
            raise ManifestError(error.message) from None
        return cls.from_document(document)

    def to_bytes(self) -> bytes:
        document = self.model_dump(mode="json", by_alias=True)
        if self.seedshare_threshold == 1:  # the original's format, which has no threshold
            del document["SeedshareThreshold"]
        return json.dumps(document, indent=2).encode() + b"\n"

    def digest(self) -> bytes:
        return hashlib.sha256(self.to_bytes()).digest()


def _describe(error: ValidationError) -> str:
    """The first problem as `Field.Path: message`, plus how many more there are."""
    problems = error.errors()
    first = problems[0]
    location = ".".join(str(part) for part in first["loc"]) or "(document)"
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "not a field of the manifest"
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return f"{location}: {message}{more}"
