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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contrast.boundedjson import JsonInputError, JsonLimits, load
from contrast.manifest.errors import ManifestError
from contrast.seed.shares import SeedShareError, load_public_key_hex

HASH_HEX = re.compile(r"^[0-9a-f]{64}$")

# A manifest is checked for size and depth before it is parsed (it reaches SetManifest from
# anyone before the first manifest is set). 4 MiB is gRPC's default message limit, which caps
# SetManifest anyway (tens of thousands of policies); a manifest nests 5 levels deep.
MANIFEST_LIMITS = JsonLimits(max_bytes=4 << 20, max_depth=32)


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


class ReferenceValues(_Model):
    """Per-platform reference values; a workload passes if any entry accepts its evidence.

    Entries stay JSON objects here; `contrast.manifest.validators` turns them into the
    attestation package's typed reference values, so this model does not depend on them.
    """

    snp: tuple[dict[str, Any], ...] = ()
    tdx: tuple[dict[str, Any], ...] = ()

    @model_validator(mode="after")
    def _not_empty(self) -> ReferenceValues:
        if not self.snp and not self.tdx:
            raise ValueError("needs at least one snp or tdx entry")
        return self


class Manifest(_Model):
    policies: dict[str, PolicyEntry] = Field(alias="Policies")
    reference_values: ReferenceValues = Field(alias="ReferenceValues")
    workload_owner_key_digests: tuple[str, ...] = Field(default=(), alias="WorkloadOwnerKeyDigests")
    seedshare_owner_pub_keys: tuple[str, ...] = Field(default=(), alias="SeedshareOwnerPubKeys")

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
        try:
            return cls.model_validate(document)
        except ValidationError as error:
            raise ManifestError(f"invalid manifest: {_describe(error)}") from None

    def to_bytes(self) -> bytes:
        document = self.model_dump(mode="json", by_alias=True)
        return json.dumps(document, indent=2).encode() + b"\n"

    def digest(self) -> bytes:
        return hashlib.sha256(self.to_bytes()).digest()


def _describe(error: ValidationError) -> str:
    """The first problem as `Field.Path: message`, plus how many more there are."""
    problems = error.errors()
    first = problems[0]
    location = ".".join(str(part) for part in first["loc"]) or "(document)"
    message = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return f"{location}: {message}{more}"
