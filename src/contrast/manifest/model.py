"""The manifest, one type: what `generate` writes and `set`, `verify`, the Coordinator and the
history read (the original's `internal/manifest/manifest.go`).

Field names are the original's (`Policies`, `ReferenceValues`, `WorkloadOwnerKeyDigests`,
`SeedshareOwnerPubKeys`), so manifests move between the two implementations. The bytes of a
manifest are what the history stores and the Coordinator compares, so `to_bytes()` is the one
writer of `manifest.json`: 2-space indent, ASCII with `\\u` escapes, a trailing newline, as
`contrast generate` has always written it (tests/manifest/test_pinned_bytes.py pins them).

Reference values are typed per platform (`SnpEntry`, `TdxEntry`, an emulated platform's entry
with its `TrustedRoots`). An entry keeps the JSON object it was read from and writes it back as
it was: an operator's entries (their key order, `null` for a value still to fill in) survive a
re-run of `generate` byte for byte. Its typed values are parsed from that object, so they
cannot disagree with it; the attestation package's `SnpReferenceValues` and
`TdxReferenceValues` are parsed when first asked for, which `from_bytes` does for every entry
unless told the bytes passed before (`generate`, whose re-runs never load the TEE modules).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any

from contrast.boundedjson import JsonInputError, JsonLimits, load
from contrast.errors import ContrastError
from contrast.manifest.errors import ManifestError
from contrast.seed.shares import SeedShareError, load_public_key_hex

if TYPE_CHECKING:
    from contrast.attestation.snp.reference import SnpReferenceValues
    from contrast.attestation.tdx.reference import TdxReferenceValues

# A manifest is checked for size and depth before it is parsed (it reaches SetManifest from
# anyone before the first manifest is set). 4 MiB is gRPC's default message limit, which caps
# SetManifest anyway (tens of thousands of policies); a manifest nests 5 levels deep.
MANIFEST_LIMITS = JsonLimits(max_bytes=4 << 20, max_depth=32)

HASH_HEX_LENGTH = 64
HASH_HEX = re.compile(r"[0-9a-f]{64}")
HEX = re.compile(r"[0-9a-f]*")

# The fields of each object, in the order the original writes them.
POLICIES = "Policies"
REFERENCE_VALUES = "ReferenceValues"
WORKLOAD_OWNER_KEY_DIGESTS = "WorkloadOwnerKeyDigests"
SEEDSHARE_OWNER_PUB_KEYS = "SeedshareOwnerPubKeys"
SEEDSHARE_THRESHOLD = "SeedshareThreshold"
_FIELDS = frozenset(
    {
        POLICIES,
        REFERENCE_VALUES,
        WORKLOAD_OWNER_KEY_DIGESTS,
        SEEDSHARE_OWNER_PUB_KEYS,
        SEEDSHARE_THRESHOLD,
    }
)
_POLICY_FIELDS = frozenset({"SANs", "WorkloadSecretID", "Role"})
_KINDS = ("snp", "tdx")

# What an entry names besides its reference values: its platform, and an emulated TEE's roots.
PLATFORM = "Platform"
TRUSTED_ROOTS = "TrustedRoots"
EMULATED_SNP = "Emulated-SNP"
EMULATED_TDX = "Emulated-TDX"
# The values only an operator knows, written as `null` ("expected missing") until filled in.
MINIMUM_TCB_FIELDS = ("BootloaderVersion", "TEEVersion", "SNPVersion", "MicrocodeVersion")
_RTMRS = 4  # a TD's runtime measurement registers


class Role(StrEnum):
    NONE = ""
    COORDINATOR = "coordinator"


@dataclass(frozen=True)
class PolicyEntry:
    """What a workload with this policy hash gets: SANs, a workload secret, a role."""

    sans: tuple[str, ...]
    workload_secret_id: str = ""
    role: Role = Role.NONE

    def to_json(self) -> dict[str, Any]:
        """Empty secret id and role are left out, as `generate` has always written them."""
        entry: dict[str, Any] = {"SANs": list(self.sans)}
        if self.workload_secret_id:
            entry["WorkloadSecretID"] = self.workload_secret_id
        if self.role is not Role.NONE:
            entry["Role"] = self.role.value
        return entry

    @classmethod
    def from_json(cls, value: Any, policy_hash: str) -> PolicyEntry:
        # Called once per policy (tens of thousands): the location is spelt out on errors only.
        if type(value) is not dict:
            raise _invalid(f"{POLICIES}.{policy_hash}", "must be an object")
        if not value.keys() <= _POLICY_FIELDS:
            unknown = sorted(set(value) - _POLICY_FIELDS)[0]
            raise _invalid(f"{POLICIES}.{policy_hash}.{unknown}", "not a field of the manifest")
        sans = value.get("SANs")
        secret = value.get("WorkloadSecretID", "")
        role = value.get("Role", "")
        if type(sans) is not list or not _all_strings(sans):
            problem = "required" if sans is None else "must be a list of strings"
            raise _invalid(f"{POLICIES}.{policy_hash}.SANs", problem)
        if type(secret) is not str:
            raise _invalid(f"{POLICIES}.{policy_hash}.WorkloadSecretID", "must be a string")
        if role == "":
            return cls(tuple(sans), secret)
        if role != Role.COORDINATOR:
            raise _invalid(
                f"{POLICIES}.{policy_hash}.Role", f'must be "" or "coordinator", not {role!r}'
            )
        return cls(tuple(sans), secret, Role.COORDINATOR)


@dataclass(frozen=True)
class EmulatedSnpRoots:
    """An Emulated-SNP entry's `TrustedRoots`: the emulated AMD ARK and ASK, PEM."""

    ark: str
    ask: str


@dataclass(frozen=True)
class EmulatedTdxRoots:
    """An Emulated-TDX entry's `TrustedRoots`: the emulated Intel root CA and TCB signers, PEM."""

    root_ca: str
    tcb_signing: tuple[str, ...] = ()


@dataclass(frozen=True)
class SnpEntry:
    """One `ReferenceValues.snp` entry; an Emulated-SNP one names its TEE's roots.

    `unfilled` names the expected-missing values still `null` (`MinimumTCB.TEEVersion`), which
    the verifier reads as "not checked". Made by `from_json` only, which checks the entry.
    """

    document: Mapping[str, Any] = field(repr=False)
    where: str = field(compare=False)
    platform: str = field(compare=False)
    roots: EmulatedSnpRoots | None = field(compare=False)
    unfilled: tuple[str, ...] = field(compare=False)

    @property
    def emulated(self) -> bool:
        return self.platform == EMULATED_SNP

    @cached_property
    def reference(self) -> SnpReferenceValues:
        """The entry's reference values (read on first use: the SNP modules are large)."""
        from contrast.attestation.snp.reference import SnpReferenceValues  # noqa: PLC0415

        values = {k: v for k, v in self.document.items() if k not in (PLATFORM, TRUSTED_ROOTS)}
        try:
            return SnpReferenceValues.from_json(values)
        except (ContrastError, ValueError, TypeError, KeyError) as error:
            raise ManifestError(f"{self.where}: {error}") from None

    @classmethod
    def from_json(cls, value: Any, where: str, *, check: bool = True) -> SnpEntry:
        document = _entry_object(value, where)
        platform = document.get(PLATFORM, "")
        trusted = document.get(TRUSTED_ROOTS)
        roots = None
        if platform == EMULATED_SNP:
            if not isinstance(trusted, dict) or not _strings(
                trusted.get("ARK"), trusted.get("ASK")
            ):
                raise ManifestError(
                    f"{where}: an {EMULATED_SNP} entry needs TrustedRoots ARK and ASK"
                )
            if trusted.keys() != {"ARK", "ASK"}:
                raise ManifestError(f"{where}: TrustedRoots has only ARK and ASK")
            roots = EmulatedSnpRoots(trusted["ARK"], trusted["ASK"])
        elif trusted is not None:
            raise ManifestError(
                f"{where}: only {EMULATED_SNP} entries may name their own TrustedRoots;"
                f" {platform or 'real platforms'} are checked against AMD's genuine roots"
            )
        tcb = document.get("MinimumTCB")
        unfilled = tuple(
            f"MinimumTCB.{name}"
            for name in MINIMUM_TCB_FIELDS
            if isinstance(tcb, dict) and name in tcb and tcb[name] is None
        )
        entry = cls(document, where, platform, roots, unfilled)
        if check:
            _ = entry.reference
        return entry


@dataclass(frozen=True)
class TdxEntry:
    """One `ReferenceValues.tdx` entry; an Emulated-TDX one names its TEE's roots.

    `unfilled`: `MrSeam` while it is `null`, and `Rtmrs[0]` of a real TD whose other RTMRs are
    predicted but whose RTMR0 only a known-good boot can give.
    """

    document: Mapping[str, Any] = field(repr=False)
    where: str = field(compare=False)
    platform: str = field(compare=False)
    roots: EmulatedTdxRoots | None = field(compare=False)
    unfilled: tuple[str, ...] = field(compare=False)

    @property
    def emulated(self) -> bool:
        return self.platform == EMULATED_TDX

    @cached_property
    def reference(self) -> TdxReferenceValues:
        """The entry's reference values (read on first use: the TDX modules are large)."""
        from contrast.attestation.tdx.reference import TdxReferenceValues  # noqa: PLC0415

        values = {k: v for k, v in self.document.items() if k not in (PLATFORM, TRUSTED_ROOTS)}
        try:
            reference = TdxReferenceValues.from_json(values)
        except (ContrastError, ValueError, TypeError, KeyError) as error:
            raise ManifestError(f"{self.where}: {error}") from None
        if self.emulated and not reference.emulated:
            raise ManifestError(f'{self.where}: an {EMULATED_TDX} entry must say "Emulated": true')
        if not self.emulated and reference.emulated:
            raise ManifestError(
                f"{self.where}: only {EMULATED_TDX} entries may be emulated or name their own"
                f" TrustedRoots; {self.platform or 'real platforms'} are checked against Intel's"
                " roots"
            )
        return reference

    @classmethod
    def from_json(cls, value: Any, where: str, *, check: bool = True) -> TdxEntry:
        document = _entry_object(value, where)
        platform = document.get(PLATFORM, "")
        trusted = document.get(TRUSTED_ROOTS)
        roots = None
        if platform == EMULATED_TDX:
            if not isinstance(trusted, dict) or not _strings(trusted.get("RootCA")):
                raise ManifestError(f"{where}: an {EMULATED_TDX} entry needs TrustedRoots RootCA")
            signing = trusted.get("TcbSigning", [])
            if not isinstance(signing, list) or not _strings(*signing):
                raise ManifestError(f"{where}: TrustedRoots.TcbSigning must be a list of PEM")
            if not trusted.keys() <= {"RootCA", "TcbSigning"}:
                raise ManifestError(f"{where}: TrustedRoots has only RootCA and TcbSigning")
            roots = EmulatedTdxRoots(trusted["RootCA"], tuple(signing))
        elif trusted is not None:
            raise ManifestError(
                f"{where}: only {EMULATED_TDX} entries may be emulated or name their own"
                f" TrustedRoots; {platform or 'real platforms'} are checked against Intel's roots"
            )
        unfilled = [name for name in ("MrSeam",) if name in document and document[name] is None]
        if _rtmr0_missing(document):
            unfilled.append("Rtmrs[0]")
        entry = cls(document, where, platform, roots, tuple(unfilled))
        if check:
            _ = entry.reference
        return entry


def _rtmr0_missing(document: Mapping[str, Any]) -> bool:
    """A real TD's entry whose RTMR0 the operator has yet to give (RTMR1/2 are predicted)."""
    rtmrs = document.get("Rtmrs")
    return (
        not document.get("Emulated", False)
        and isinstance(rtmrs, list)
        and len(rtmrs) == _RTMRS
        and rtmrs[0] is None
        and any(value is not None for value in rtmrs[1:])
    )


def _entry_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f"{where}: must be an object")
    if not isinstance(value.get(PLATFORM, ""), str):
        raise ManifestError(f"{where}.{PLATFORM}: must be a string")
    # A copy: the entry is written back as it is, so nobody else may hold its objects.
    return copy.deepcopy(value)


def _all_strings(values: list[Any]) -> bool:
    """Whether every item is a `str` (join refuses anything else, at C speed)."""
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def _strings(*values: Any) -> bool:
    return all(isinstance(value, str) for value in values)


@dataclass(frozen=True)
class ReferenceValues:
    """Per-platform reference values; a workload passes if any entry of its platform accepts it."""

    snp: tuple[SnpEntry, ...] = ()
    tdx: tuple[TdxEntry, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.snp or self.tdx)

    @property
    def entries(self) -> tuple[SnpEntry | TdxEntry, ...]:
        return (*self.snp, *self.tdx)

    def unfilled(self) -> list[str]:
        """The expected-missing values still `null`, as `snp[0] (Metal-QEMU-SNP) MinimumTCB.X`.

        The verifier reads `null` as "not checked"; `contrast set` refuses such a manifest, so
        that a deployment never runs without the TCB minimum or MRSEAM its operator meant to set.
        """
        snp: list[tuple[str, SnpEntry | TdxEntry]]
        snp = [(f"snp[{index}]", entry) for index, entry in enumerate(self.snp)]
        tdx = [(f"tdx[{index}]", entry) for index, entry in enumerate(self.tdx)]
        return [
            f"{at} ({entry.platform or None}) {name}"
            for at, entry in (*snp, *tdx)
            for name in entry.unfilled
        ]

    def to_json(self) -> dict[str, list[dict[str, Any]]]:
        """Kinds without entries are left out."""
        document = {
            "snp": [copy.deepcopy(dict(entry.document)) for entry in self.snp],
            "tdx": [copy.deepcopy(dict(entry.document)) for entry in self.tdx],
        }
        return {kind: entries for kind, entries in document.items() if entries}

    @classmethod
    def from_json(cls, value: Any, *, check: bool = True) -> ReferenceValues:
        """Read `ReferenceValues`; `check=False` leaves the entries' values to their first use."""
        if not isinstance(value, dict):
            raise _invalid(REFERENCE_VALUES, "must be an object")
        unknown = sorted(set(value) - set(_KINDS))
        if unknown:
            raise _invalid(f"{REFERENCE_VALUES}.{unknown[0]}", "not a field of the manifest")
        lists = {kind: value.get(kind) or [] for kind in _KINDS}
        for kind, entries in lists.items():
            if not isinstance(entries, list):
                raise _invalid(f"{REFERENCE_VALUES}.{kind}", "must be a list")
        where = f"{REFERENCE_VALUES}.{{}}[{{}}]"
        return cls(
            tuple(
                SnpEntry.from_json(entry, where.format("snp", index), check=check)
                for index, entry in enumerate(lists["snp"])
            ),
            tuple(
                TdxEntry.from_json(entry, where.format("tdx", index), check=check)
                for index, entry in enumerate(lists["tdx"])
            ),
        )

    def check(self) -> None:
        """Parse every entry's values now (a ManifestError names the first bad one)."""
        for entry in self.entries:
            _ = entry.reference


@dataclass(frozen=True)
class Manifest:
    """A manifest: the policies that may join, the platforms they run on, who owns the deployment.

    Made by `generate` (which writes it with `to_bytes`) or read with `from_bytes`. A draft (what
    `generate` starts from: an operator may write only the reference values before the first
    run) may lack policies, reference values and a Coordinator; a manifest to set may not.
    """

    policies: Mapping[str, PolicyEntry] = field(default_factory=dict)
    reference_values: ReferenceValues = field(default_factory=ReferenceValues)
    workload_owner_key_digests: tuple[str, ...] = ()
    seedshare_owner_pub_keys: tuple[str, ...] = ()
    # How many seed share owners recover the seed together (absent: 1, each alone, as the
    # original). It is part of the manifest, so the Coordinator's attested manifest fixes it.
    seedshare_threshold: int = 1

    def __post_init__(self) -> None:
        # All keys at once (one match over their text), each on its own only to name a bad one.
        lengths = set(map(len, self.policies))
        if not lengths <= {HASH_HEX_LENGTH} or not HEX.fullmatch("".join(self.policies)):
            for policy_hash in self.policies:
                if not HASH_HEX.fullmatch(policy_hash):
                    raise _invalid(
                        POLICIES,
                        f"key {policy_hash!r} is not a policy hash (64 lower-case hex characters)",
                    )
        for value in self.workload_owner_key_digests:
            if not HASH_HEX.fullmatch(value):
                raise _invalid(
                    WORKLOAD_OWNER_KEY_DIGESTS,
                    f"{value!r} is not a SHA-256 digest (64 lower-case hex)",
                )
        for value in self.seedshare_owner_pub_keys:
            try:
                load_public_key_hex(value)
            except SeedShareError as error:
                raise _invalid(SEEDSHARE_OWNER_PUB_KEYS, f"{value[:16]}…: {error}") from None
        threshold, owners = self.seedshare_threshold, len(self.seedshare_owner_pub_keys)
        if threshold != 1:
            # Imported here: it loads shamir-mnemonic, which a manifest without a threshold (and
            # so a re-run of generate for one) never needs.
            from contrast.seed.threshold import MAX_OWNERS  # noqa: PLC0415

            if threshold < 1 or threshold > max(owners, 1) or threshold > MAX_OWNERS:
                raise _invalid(
                    SEEDSHARE_THRESHOLD,
                    f"{SEEDSHARE_THRESHOLD} {threshold} needs 1 ≤ threshold ≤ the {owners} seed"
                    f" share owner keys (at most {MAX_OWNERS})",
                )
        if threshold > 1 and len(set(self.seedshare_owner_pub_keys)) != owners:
            raise _invalid(
                SEEDSHARE_OWNER_PUB_KEYS,
                "lists a key twice: its owner would hold two shares of a threshold",
            )

    @property
    def coordinator_policy_hashes(self) -> list[str]:
        return [h for h, entry in self.policies.items() if entry.role is Role.COORDINATOR]

    def check_complete(self) -> None:
        """Refuse a draft: a manifest to set has a Coordinator's policy and reference values."""
        if not self.reference_values:
            raise _invalid(REFERENCE_VALUES, "needs at least one snp or tdx entry")
        if not self.coordinator_policy_hashes:
            raise _invalid(
                POLICIES, 'no policy has Role "coordinator": the Coordinator must be listed'
            )

    @classmethod
    def from_bytes(cls, data: bytes, *, draft: bool = False, checked: bool = False) -> Manifest:
        """Read and check a manifest; a ManifestError names the first problem.

        `draft`: fields may be missing (`generate`'s starting point). `checked`: these bytes
        passed this check before, so the entries' reference values are parsed on first use.
        """
        document = _parse(data)
        if not isinstance(document, dict):
            raise ManifestError("invalid manifest: not a JSON object")
        unknown = sorted(set(document) - _FIELDS)
        if unknown:
            raise _invalid(unknown[0], "not a field of the manifest")
        if not draft:
            for name in (POLICIES, REFERENCE_VALUES):
                if name not in document:
                    raise _invalid(name, "required")
        policies = document.get(POLICIES, {})
        if not isinstance(policies, dict):
            raise _invalid(POLICIES, "must be an object")
        manifest = cls(
            {h: PolicyEntry.from_json(e, h) for h, e in policies.items()},
            ReferenceValues.from_json(document.get(REFERENCE_VALUES, {}), check=False),
            _strings_of(document, WORKLOAD_OWNER_KEY_DIGESTS),
            _strings_of(document, SEEDSHARE_OWNER_PUB_KEYS),
            _threshold(document.get(SEEDSHARE_THRESHOLD, 1)),
        )
        if not checked:
            manifest.reference_values.check()
        if not draft:
            manifest.check_complete()
        return manifest

    def to_bytes(self) -> bytes:
        """`manifest.json`; `SeedshareThreshold` only above 1, so such manifests stay the
        original's format, which has no threshold."""
        document: dict[str, Any] = {
            POLICIES: {h: entry.to_json() for h, entry in self.policies.items()},
            REFERENCE_VALUES: self.reference_values.to_json(),
            WORKLOAD_OWNER_KEY_DIGESTS: list(self.workload_owner_key_digests),
            SEEDSHARE_OWNER_PUB_KEYS: list(self.seedshare_owner_pub_keys),
        }
        if self.seedshare_threshold > 1:
            document[SEEDSHARE_THRESHOLD] = self.seedshare_threshold
        return json.dumps(document, indent=2).encode() + b"\n"

    def digest(self) -> bytes:
        return hashlib.sha256(self.to_bytes()).digest()


def _parse(data: bytes) -> Any:
    """The JSON of `data`, bounded in size and depth before json reads it.

    Read with json, not orjson (about 10 ms less of the 40 a 10 000-policy manifest takes): the
    Coordinator's and Initializer's images do not carry orjson (`imagebuild/spec.py`).
    """
    try:
        return load(data, MANIFEST_LIMITS, what="the manifest")
    except JsonInputError as error:
        raise ManifestError(error.message) from None


def _strings_of(document: Mapping[str, Any], name: str) -> tuple[str, ...]:
    values = document.get(name, [])
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise _invalid(name, "must be a list of strings")
    return tuple(values)


def _threshold(value: Any) -> int:
    if type(value) is not int:
        raise _invalid(SEEDSHARE_THRESHOLD, f"must be a whole number, not {value!r}")
    return value


def _invalid(location: str, message: str) -> ManifestError:
    return ManifestError(f"invalid manifest: {location}: {message}")
