"""SNP reference values: what an authentic report must also say to be accepted.

`snp.verify` decides whether a report is authentic; this module whether its claims are the ones a
manifest expects. The JSON form mirrors the original Contrast manifest's `ReferenceValues.snp[]`
entries (research/contrast.md §3.2: `ProductName`, `TrustedMeasurement`, `MinimumTCB`,
`GuestPolicy`, `PlatformInfo`, `MinimumMitigationVector`, `AllowedChipIDs`); the policy and
platform-info rules follow go-sev-guest's `validate` semantics (research/attestation.md §2.6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contrast.attestation.errors import Reason, ReferenceMismatch
from contrast.attestation.snp.report import GuestPolicy, PlatformInfo, Product, TcbVersion
from contrast.attestation.snp.verify import VerifiedReport

MEASUREMENT_SIZE = 48
CHIP_ID_SIZE = 64
ID_KEY_DIGEST_SIZE = 48
REPORT_DATA_SIZE = 64
HOST_DATA_SIZE = 32

# PLATFORM_INFO bits a reference value may forbid (go-sev-guest treats them as ceilings) and bits
# it may require (floors), with their manifest names.
_PLATFORM_CEILINGS = {
    "SMTEnabled": PlatformInfo.SMT_EN,
    "TSMEEnabled": PlatformInfo.TSME_EN,
    "TIOEnabled": PlatformInfo.TIO_EN,
}
_PLATFORM_FLOORS = {
    "ECCEnabled": PlatformInfo.ECC_EN,
    "RAPLDisabled": PlatformInfo.RAPL_DIS,
    "CiphertextHidingDRAMEnabled": PlatformInfo.CIPHERTEXT_HIDING_EN,
    "AliasCheckComplete": PlatformInfo.ALIAS_CHECK_COMPLETE,
}
_CEILING_BITS = sum(_PLATFORM_CEILINGS.values())
_FLOOR_BITS = sum(_PLATFORM_FLOORS.values())

# Guest policy bits a reference value may allow (the report must not set them otherwise), and
# bits it may require, with the manifest's (go-sev-guest `abi.SnpPolicy`) names.
_POLICY_ALLOWS = {
    "SMT": ("allow_smt", GuestPolicy.SMT),
    "MigrateMA": ("allow_migrate_ma", GuestPolicy.MIGRATE_MA),
    "Debug": ("allow_debug", GuestPolicy.DEBUG),
    "CXLAllowed": ("allow_cxl", GuestPolicy.CXL_ALLOW),
}
_POLICY_REQUIRES = {
    "SingleSocket": ("require_single_socket", GuestPolicy.SINGLE_SOCKET),
    "MemAES256XTS": ("require_mem_aes_256_xts", GuestPolicy.MEM_AES_256_XTS),
    "RAPLDis": ("require_rapl_dis", GuestPolicy.RAPL_DIS),
    "CipherTextHidingDRAM": ("require_ciphertext_hiding", GuestPolicy.CIPHERTEXT_HIDING),
    "PageSwapDisable": ("require_page_swap_disable", GuestPolicy.PAGE_SWAP_DISABLE),
}
_TCB_NAMES = {
    "BootloaderVersion": "bootloader",
    "TEEVersion": "tee",
    "SNPVersion": "snp",
    "MicrocodeVersion": "microcode",
    "FMCVersion": "fmc",
}


@dataclass(frozen=True)
class MinimumTcb:
    """Lowest acceptable SPL per component; None accepts any value of that component."""

    bootloader: int | None = None
    tee: int | None = None
    snp: int | None = None
    microcode: int | None = None
    fmc: int | None = None

    def shortfall(self, actual: TcbVersion) -> list[str]:
        """The components of `actual` below this minimum, as "name actual < minimum"."""
        low = []
        for name, minimum in self._items():
            value = getattr(actual, name)
            if minimum is not None and (value if value is not None else 0) < minimum:
                low.append(f"{name} {value} < {minimum}")
        return low

    def to_json(self) -> dict[str, int]:
        return {key: value for key, value in self._json_items() if value is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MinimumTcb:
        if not isinstance(data, Mapping):
            raise ValueError("MinimumTCB must be an object")
        unknown = set(data) - set(_TCB_NAMES)
        if unknown:
            raise ValueError(f"MinimumTCB: unknown fields {sorted(unknown)}")
        values = {}
        for key, name in _TCB_NAMES.items():
            value = data.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255
            ):
                raise ValueError(f"MinimumTCB.{key} must be a number 0..255, got {value!r}")
            values[name] = value
        return cls(**values)

    def _items(self) -> list[tuple[str, int | None]]:
        return [(name, getattr(self, name)) for name in _TCB_NAMES.values()]

    def _json_items(self) -> list[tuple[str, int | None]]:
        return [(key, getattr(self, name)) for key, name in _TCB_NAMES.items()]


@dataclass(frozen=True)
class SnpReferenceValues:
    """One acceptable configuration of an SNP guest.

    An empty `measurements` set accepts nothing (fail closed). `None` for the optional matches
    (`allowed_chip_ids`, `trusted_id_key_digests`, `report_data`, `host_data`, `vmpl`) means
    "not checked". The launch TCB is held to `minimum_launch_tcb`, which defaults to
    `minimum_tcb` as in the original.
    """

    measurements: frozenset[bytes] = frozenset()
    product: Product | None = None
    minimum_tcb: MinimumTcb = field(default_factory=MinimumTcb)
    minimum_launch_tcb: MinimumTcb | None = None
    minimum_abi_major: int = 0
    minimum_abi_minor: int = 0
    allow_debug: bool = False
    allow_migrate_ma: bool = False
    allow_smt: bool = True
    allow_cxl: bool = False
    require_single_socket: bool = False
    require_mem_aes_256_xts: bool = False
    require_rapl_dis: bool = False
    require_ciphertext_hiding: bool = False
    require_page_swap_disable: bool = False
    vmpl: int | None = 0
    platform_info_required: int = 0
    platform_info_forbidden: int = 0
    minimum_mitigation_vector: int = 0
    allowed_chip_ids: frozenset[bytes] | None = None
    trusted_id_key_digests: frozenset[bytes] | None = None
    report_data: bytes | None = None
    host_data: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "measurements", frozenset(bytes(m) for m in self.measurements))
        for measurement in self.measurements:
            _check_size(measurement, MEASUREMENT_SIZE, "TrustedMeasurement")
        if self.platform_info_required & ~_FLOOR_BITS:
            raise ValueError("PlatformInfo: only ECC, RAPL, ciphertext hiding and alias check"
                             " can be required")  # fmt: skip
        if self.platform_info_forbidden & ~_CEILING_BITS:
            raise ValueError("PlatformInfo: only SMT, TSME and TIO can be forbidden")
        for digests, size, name in (
            (self.allowed_chip_ids, CHIP_ID_SIZE, "AllowedChipIDs"),
            (self.trusted_id_key_digests, ID_KEY_DIGEST_SIZE, "TrustedIDKeyDigests"),
        ):
            for value in digests or ():
                _check_size(value, size, name)
        if self.report_data is not None:
            _check_size(self.report_data, REPORT_DATA_SIZE, "ReportData")
        if self.host_data is not None:
            _check_size(self.host_data, HOST_DATA_SIZE, "HostData")

    @property
    def launch_tcb_minimum(self) -> MinimumTcb:
        return self.minimum_launch_tcb or self.minimum_tcb

    def to_json(self) -> dict[str, Any]:
        """The manifest form (field names of the original's `SNPReferenceValues`)."""
        measurements = sorted(m.hex() for m in self.measurements)
        out: dict[str, Any] = {}
        if self.product is not None:
            out["ProductName"] = self.product.value
        out["TrustedMeasurement"] = measurements[0] if len(measurements) == 1 else measurements
        out["MinimumTCB"] = self.minimum_tcb.to_json()
        if self.minimum_launch_tcb is not None:
            out["MinimumLaunchTCB"] = self.minimum_launch_tcb.to_json()
        policy: dict[str, Any] = {
            "ABIMinor": self.minimum_abi_minor,
            "ABIMajor": self.minimum_abi_major,
        }
        for key, (name, _) in (_POLICY_ALLOWS | _POLICY_REQUIRES).items():
            policy[key] = getattr(self, name)
        out["GuestPolicy"] = policy
        platform = {
            key: not self.platform_info_forbidden & bit for key, bit in _PLATFORM_CEILINGS.items()
        }
        platform |= {
            key: bool(self.platform_info_required & bit) for key, bit in _PLATFORM_FLOORS.items()
        }
        out["PlatformInfo"] = platform
        out["MinimumMitigationVector"] = self.minimum_mitigation_vector
        out["AllowedChipIDs"] = sorted(c.hex() for c in self.allowed_chip_ids or ())
        if self.vmpl != 0:
            out["VMPL"] = self.vmpl
        if self.trusted_id_key_digests is not None:
            out["TrustedIDKeyDigests"] = sorted(d.hex() for d in self.trusted_id_key_digests)
        if self.report_data is not None:
            out["ReportData"] = self.report_data.hex()
        if self.host_data is not None:
            out["HostData"] = self.host_data.hex()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SnpReferenceValues:
        """Read the manifest form; ValueError naming the field on bad input.

        An empty `AllowedChipIDs` list admits any chip (as in the original). Unknown fields are
        refused, so a misspelt rule cannot silently turn into "no rule".
        """
        if not isinstance(data, Mapping):
            raise ValueError("an SNP reference value must be a JSON object")
        known = {
            "ProductName", "TrustedMeasurement", "MinimumTCB", "MinimumLaunchTCB", "GuestPolicy",
            "PlatformInfo", "MinimumMitigationVector", "AllowedChipIDs", "VMPL",
            "TrustedIDKeyDigests", "ReportData", "HostData",
        }  # fmt: skip
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown SNP reference value fields {sorted(unknown)}")
        values: dict[str, Any] = {}
        if data.get("ProductName"):
            name = str(data["ProductName"])
            product = Product.from_name(name)
            if product is None:
                raise ValueError(f"ProductName {name!r} is not Milan, Genoa or Turin")
            values["product"] = product
        measurement = data.get("TrustedMeasurement", [])
        measurements = [measurement] if isinstance(measurement, str) else measurement
        values["measurements"] = frozenset(
            _hex(m, MEASUREMENT_SIZE, "TrustedMeasurement") for m in _list(measurements)
        )
        if "MinimumTCB" in data:
            values["minimum_tcb"] = MinimumTcb.from_json(data["MinimumTCB"])
        if "MinimumLaunchTCB" in data:
            values["minimum_launch_tcb"] = MinimumTcb.from_json(data["MinimumLaunchTCB"])
        values.update(_guest_policy_fields(data.get("GuestPolicy", {})))
        values.update(_platform_info_fields(data.get("PlatformInfo", {})))
        vector = data.get("MinimumMitigationVector", 0)
        if isinstance(vector, bool) or not isinstance(vector, int) or not 0 <= vector < 1 << 64:
            raise ValueError("MinimumMitigationVector must be a uint64")
        values["minimum_mitigation_vector"] = vector
        chips = _list(data.get("AllowedChipIDs") or [])
        if chips:
            values["allowed_chip_ids"] = frozenset(
                _hex(c, CHIP_ID_SIZE, "AllowedChipIDs") for c in chips
            )
        if "VMPL" in data:
            vmpl = data["VMPL"]
            if vmpl is not None and (isinstance(vmpl, bool) or vmpl not in range(4)):
                raise ValueError(f"VMPL must be 0..3 or null, got {vmpl!r}")
            values["vmpl"] = vmpl
        if "TrustedIDKeyDigests" in data:
            values["trusted_id_key_digests"] = frozenset(
                _hex(d, ID_KEY_DIGEST_SIZE, "TrustedIDKeyDigests")
                for d in _list(data["TrustedIDKeyDigests"])
            )
        if data.get("ReportData") is not None:
            values["report_data"] = _hex(data["ReportData"], REPORT_DATA_SIZE, "ReportData")
        if data.get("HostData") is not None:
            values["host_data"] = _hex(data["HostData"], HOST_DATA_SIZE, "HostData")
        return cls(**values)


def _guest_policy_fields(policy: object) -> dict[str, Any]:
    """`GuestPolicy`'s fields: the minimum ABI version and the policy bits allowed or required."""
    if not isinstance(policy, Mapping):
        raise ValueError("GuestPolicy must be an object")
    unknown = set(policy) - {"ABIMinor", "ABIMajor", *_POLICY_ALLOWS, *_POLICY_REQUIRES}
    if unknown:
        raise ValueError(f"GuestPolicy: unknown fields {sorted(unknown)}")
    values: dict[str, Any] = {
        "minimum_abi_minor": _byte(policy.get("ABIMinor", 0), "GuestPolicy.ABIMinor"),
        "minimum_abi_major": _byte(policy.get("ABIMajor", 0), "GuestPolicy.ABIMajor"),
    }
    for key, (name, _) in (_POLICY_ALLOWS | _POLICY_REQUIRES).items():
        if key in policy:
            values[name] = _bool(policy[key], f"GuestPolicy.{key}")
    return values


def _platform_info_fields(platform: object) -> dict[str, int]:
    """`PlatformInfo` as two masks: the bits a report must not set, and those it must."""
    if not isinstance(platform, Mapping):
        raise ValueError("PlatformInfo must be an object")
    unknown = set(platform) - {*_PLATFORM_CEILINGS, *_PLATFORM_FLOORS}
    if unknown:
        raise ValueError(f"PlatformInfo: unknown fields {sorted(unknown)}")
    return {
        "platform_info_forbidden": sum(
            bit
            for key, bit in _PLATFORM_CEILINGS.items()
            if key in platform and not _bool(platform[key], f"PlatformInfo.{key}")
        ),
        "platform_info_required": sum(
            bit
            for key, bit in _PLATFORM_FLOORS.items()
            if _bool(platform.get(key, False), f"PlatformInfo.{key}")
        ),
    }


def validate_report(verified: VerifiedReport, reference: SnpReferenceValues) -> None:
    """Refuse an authentic report whose claims differ from `reference`.

    Raises ReferenceMismatch naming the field, with reason DEBUG_NOT_ALLOWED for a debuggable
    guest, TCB_TOO_LOW for an outdated platform, REFERENCE_MISMATCH otherwise.
    """
    report = verified.report
    if reference.product is not None and verified.product is not reference.product:
        raise ReferenceMismatch("ProductName", reference.product.value, verified.product.value)
    if report.measurement not in reference.measurements:
        expected = " or ".join(sorted(m.hex() for m in reference.measurements))
        raise ReferenceMismatch(
            "TrustedMeasurement",
            expected or "(none configured)",
            report.measurement.hex(),
            hint="the guest runs other firmware, kernel or command line than the manifest names",
        )
    _check_policy(report.policy, reference)
    for what, actual, minimum in (
        ("REPORTED_TCB", report.reported_tcb, reference.minimum_tcb),
        ("CURRENT_TCB", report.current_tcb, reference.minimum_tcb),
        ("LAUNCH_TCB", report.launch_tcb, reference.launch_tcb_minimum),
    ):
        low = minimum.shortfall(actual)
        if low:
            raise ReferenceMismatch(
                f"MinimumTCB ({what})",
                str(minimum.to_json()),
                ", ".join(low),
                reason=Reason.TCB_TOO_LOW,
                hint="update the host's SEV firmware and microcode, or lower MinimumTCB",
            )
    if reference.vmpl is not None and report.vmpl != reference.vmpl:
        raise ReferenceMismatch("VMPL", str(reference.vmpl), str(report.vmpl))
    info = report.platform_info
    missing = reference.platform_info_required & ~info
    forbidden = reference.platform_info_forbidden & info
    if missing or forbidden:
        raise ReferenceMismatch(
            "PlatformInfo",
            f"bits {reference.platform_info_required:#x} set and"
            f" {reference.platform_info_forbidden:#x} clear",
            f"{int(info):#x}",
        )
    if reference.minimum_mitigation_vector:
        for what, vector in (
            ("LAUNCH_MIT_VECTOR", report.launch_mit_vector),
            ("CURRENT_MIT_VECTOR", report.current_mit_vector),
        ):
            have = vector or 0
            if have & reference.minimum_mitigation_vector != reference.minimum_mitigation_vector:
                raise ReferenceMismatch(
                    f"MinimumMitigationVector ({what})",
                    f"{reference.minimum_mitigation_vector:#x}",
                    "none (report version < 5)" if vector is None else f"{have:#x}",
                    reason=Reason.TCB_TOO_LOW,
                )
    _check_member(report.chip_id, reference.allowed_chip_ids, "AllowedChipIDs")
    _check_member(report.id_key_digest, reference.trusted_id_key_digests, "TrustedIDKeyDigests")
    for name, claimed, wanted in (
        ("ReportData", report.report_data, reference.report_data),
        ("HostData", report.host_data, reference.host_data),
    ):
        if wanted is not None and claimed != wanted:
            raise ReferenceMismatch(name, wanted.hex(), claimed.hex())


def _check_policy(policy: GuestPolicy, reference: SnpReferenceValues) -> None:
    if policy.debug and not reference.allow_debug:
        raise ReferenceMismatch(
            "GuestPolicy.Debug",
            "false",
            "true",
            reason=Reason.DEBUG_NOT_ALLOWED,
            hint="the guest allows the host to debug it (read its memory); never in production",
        )
    for key, (name, bit) in _POLICY_ALLOWS.items():
        if policy & bit and not getattr(reference, name):
            raise ReferenceMismatch(f"GuestPolicy.{key}", "false", "true")
    for key, (name, bit) in _POLICY_REQUIRES.items():
        if getattr(reference, name) and not policy & bit:
            raise ReferenceMismatch(f"GuestPolicy.{key}", "true", "false")
    required = (reference.minimum_abi_major, reference.minimum_abi_minor)
    if (policy.abi_major, policy.abi_minor) < required:
        raise ReferenceMismatch(
            "GuestPolicy.ABI",
            f"at least {required[0]}.{required[1]}",
            f"{policy.abi_major}.{policy.abi_minor}",
        )


def _check_member(value: bytes, allowed: frozenset[bytes] | None, name: str) -> None:
    if allowed is not None and value not in allowed:
        raise ReferenceMismatch(
            name, " or ".join(sorted(a.hex() for a in allowed)) or "(none)", value.hex()
        )


def _check_size(value: bytes, size: int, name: str) -> None:
    if len(value) != size:
        raise ValueError(f"{name}: expected {size} bytes, got {len(value)}")


def _hex(value: object, size: int, name: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected a hex string, got {value!r}")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not hex") from None
    _check_size(raw, size, name)
    return raw


def _list(value: object) -> Iterable[object]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list, got {value!r}")
    return value


def _byte(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
        raise ValueError(f"{name} must be a number 0..255, got {value!r}")
    return value


def _bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value
