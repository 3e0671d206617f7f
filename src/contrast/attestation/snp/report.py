"""The SEV-SNP ATTESTATION_REPORT: its 1184-byte layout and the bit fields inside it.

Layout per AMD's SEV-SNP firmware ABI specification, table "ATTESTATION_REPORT structure",
checked against real v2, v3 and v5 reports (research/attestation.md §1). All integers are
little-endian. This module only parses and serialises; whether a report is acceptable is decided
in `snp.verify` and `snp.reference`.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from enum import IntEnum, StrEnum

from contrast.attestation.errors import MalformedEvidence, Reason

REPORT_SIZE = 0x4A0
SIGNED_SIZE = 0x2A0  # the signature covers bytes 0x000..0x29F
SIGNATURE_COMPONENT_SIZE = 72  # R and S: little-endian, zero-padded to 72 bytes each
SUPPORTED_VERSIONS = range(2, 6)
# Version 3 added CPUID family/model/stepping; version 5 the mitigation vectors.
CPUID_SINCE_VERSION = 3
MITIGATION_VECTORS_SINCE_VERSION = 5
CHIP_ID_SIZE = 64
TURIN_CHIP_ID_SIZE = 8  # Turin's chip id uses only the first 8 bytes of the field
SIGNATURE_ALGO_ECDSA_P384_SHA384 = 1
TCB_SIZE = 8

# Offsets of the fields.
_VERSION = 0x000  # then GUEST_SVN u32, POLICY u64
_FAMILY_ID = 0x010
_IMAGE_ID = 0x020
_VMPL = 0x030  # then SIGNATURE_ALGO u32
_CURRENT_TCB = 0x038
_PLATFORM_INFO = 0x040  # then the signer info u32 (AUTHOR_KEY_EN, MASK_CHIP_KEY, SIGNING_KEY)
_REPORT_DATA = 0x050
_MEASUREMENT = 0x090
_HOST_DATA = 0x0C0
_ID_KEY_DIGEST = 0x0E0
_AUTHOR_KEY_DIGEST = 0x110
_REPORT_ID = 0x140
_REPORT_ID_MA = 0x160
_REPORTED_TCB = 0x180
_CPUID = 0x188  # FAM_ID, MOD_ID, STEP (v3+; reserved before)
_CHIP_ID = 0x1A0
_COMMITTED_TCB = 0x1E0
_CURRENT_VERSION = 0x1E8  # BUILD, MINOR, MAJOR
_COMMITTED_VERSION = 0x1EC  # BUILD, MINOR, MAJOR
_LAUNCH_TCB = 0x1F0
_LAUNCH_MIT_VECTOR = 0x1F8  # v5+; reserved before
_CURRENT_MIT_VECTOR = 0x200
_MIT_VECTORS_END = 0x208
_SIGNATURE_R = 0x2A0
_SIGNATURE_S = 0x2E8
# Regions reserved as must-be-zero in every version. go-sev-guest (which the original Contrast
# uses) refuses reports where they are not, and so do we: a signed report with bits there comes
# from firmware whose format we do not know.
_MUST_BE_ZERO = (
    (0x04C, 0x050),
    (0x18B, 0x1A0),
    (0x1EB, 0x1EC),
    (0x1EF, 0x1F0),
    (_MIT_VECTORS_END, SIGNED_SIZE),
    (0x330, REPORT_SIZE),  # the rest of the 512-byte signature field
)


class Product(StrEnum):
    """An AMD EPYC product line; each has its own ARK/ASK/ASVK and its own VCEKs."""

    MILAN = "Milan"
    GENOA = "Genoa"
    TURIN = "Turin"

    @classmethod
    def from_cpuid(cls, family: int, model: int) -> Product | None:
        """The product of a combined CPUID family/model as virtee/sev maps them (None: unknown)."""
        if family == 0x19 and model <= 0x0F:
            return cls.MILAN
        if family == 0x19 and (0x10 <= model <= 0x1F or 0xA0 <= model <= 0xAF):
            return cls.GENOA
        if family == 0x1A and model <= 0x11:
            return cls.TURIN
        return None

    @classmethod
    def from_name(cls, name: str) -> Product | None:
        """The product of a VCEK productName such as "Milan-B0" or "Genoa" (None: unknown)."""
        try:
            return cls(name.split("-", 1)[0])
        except ValueError:
            return None

    @property
    def tcb_layout(self) -> TcbLayout:
        return TcbLayout.TURIN if self is Product.TURIN else TcbLayout.MILAN_GENOA


class TcbLayout(StrEnum):
    """How the 8 bytes of a TCB_VERSION are assigned (research/attestation.md §1.2)."""

    MILAN_GENOA = "milan-genoa"  # [bl, tee, 0, 0, 0, 0, snp, ucode]
    TURIN = "turin"  # [fmc, bl, tee, snp, 0, 0, 0, ucode]


@dataclass(frozen=True)
class TcbVersion:
    """Security patch levels (SPLs) of the firmware components.

    `fmc` is None in the Milan/Genoa layout, which has no FMC component. `reserved` holds the
    layout's reserved bytes (little-endian, in byte order) so that parsing round-trips exactly;
    it is zero in every real report and certificate seen. Equality covers every byte.
    """

    bootloader: int
    tee: int
    snp: int
    microcode: int
    fmc: int | None = None
    reserved: int = 0

    @property
    def layout(self) -> TcbLayout:
        return TcbLayout.MILAN_GENOA if self.fmc is None else TcbLayout.TURIN

    @classmethod
    def from_bytes(cls, data: bytes, layout: TcbLayout) -> TcbVersion:
        """The TCB_VERSION in `data` (8 bytes) decoded with `layout`."""
        return _tcb_version(bytes(data), layout)

    @classmethod
    def _decode(cls, data: bytes, layout: TcbLayout) -> TcbVersion:
        if len(data) != TCB_SIZE:
            raise MalformedEvidence(
                Reason.MALFORMED_REPORT, f"a TCB_VERSION is {TCB_SIZE} bytes, got {len(data)}"
            )
        if layout is TcbLayout.TURIN:  # [fmc, bl, tee, snp, reserved × 3, ucode]
            reserved = int.from_bytes(data[4:7], "little")
            return cls(data[1], data[2], data[3], data[7], fmc=data[0], reserved=reserved)
        # [bl, tee, reserved × 4, snp, ucode]
        return cls(data[0], data[1], data[6], data[7], reserved=int.from_bytes(data[2:6], "little"))

    def to_bytes(self) -> bytes:
        if self.fmc is not None:
            reserved = self.reserved.to_bytes(3, "little")
            return bytes([self.fmc, self.bootloader, self.tee, self.snp, *reserved, self.microcode])
        reserved = self.reserved.to_bytes(4, "little")
        return bytes([self.bootloader, self.tee, *reserved, self.snp, self.microcode])

    def components(self) -> dict[str, int | None]:
        """The named components (for claims and messages), without the reserved bytes."""
        return {
            "bootloader": self.bootloader,
            "tee": self.tee,
            "snp": self.snp,
            "microcode": self.microcode,
            "fmc": self.fmc,
        }

    def at_least(self, minimum: TcbVersion) -> bool:
        """Component-wise ≥ (AMD's rule; a TCB is never compared as one integer).

        A minimum without `fmc` says nothing about FMC.
        """
        pairs = [
            (self.bootloader, minimum.bootloader),
            (self.tee, minimum.tee),
            (self.snp, minimum.snp),
            (self.microcode, minimum.microcode),
        ]
        if minimum.fmc is not None:
            pairs.append((self.fmc or 0, minimum.fmc))
        return all(actual >= required for actual, required in pairs)

    def __str__(self) -> str:
        parts = [] if self.fmc is None else [f"fmc={self.fmc}"]
        parts += [f"bl={self.bootloader}", f"tee={self.tee}", f"snp={self.snp}"]
        return " ".join([*parts, f"ucode={self.microcode}"])


class GuestPolicy(int):
    """The guest POLICY u64 the guest owner set at launch (research/attestation.md §1.3)."""

    SMT = 1 << 16
    RESERVED_MUST_BE_ONE = 1 << 17
    MIGRATE_MA = 1 << 18
    DEBUG = 1 << 19
    SINGLE_SOCKET = 1 << 20
    CXL_ALLOW = 1 << 21
    MEM_AES_256_XTS = 1 << 22
    RAPL_DIS = 1 << 23
    CIPHERTEXT_HIDING = 1 << 24
    PAGE_SWAP_DISABLE = 1 << 25

    @property
    def abi_minor(self) -> int:
        return self & 0xFF

    @property
    def abi_major(self) -> int:
        return (self >> 8) & 0xFF

    @property
    def smt(self) -> bool:
        return bool(self & self.SMT)

    @property
    def migrate_ma(self) -> bool:
        return bool(self & self.MIGRATE_MA)

    @property
    def debug(self) -> bool:
        return bool(self & self.DEBUG)

    @property
    def single_socket(self) -> bool:
        return bool(self & self.SINGLE_SOCKET)

    @property
    def cxl_allow(self) -> bool:
        return bool(self & self.CXL_ALLOW)

    @property
    def mem_aes_256_xts(self) -> bool:
        return bool(self & self.MEM_AES_256_XTS)

    @property
    def rapl_dis(self) -> bool:
        return bool(self & self.RAPL_DIS)

    @property
    def ciphertext_hiding(self) -> bool:
        return bool(self & self.CIPHERTEXT_HIDING)

    @property
    def page_swap_disable(self) -> bool:
        return bool(self & self.PAGE_SWAP_DISABLE)


class PlatformInfo(int):
    """PLATFORM_INFO u64: platform features enabled when the report was made (§1.4).

    Unknown bits are kept, not refused: real Turin hardware sets bit 6, whose meaning is not
    public.
    """

    SMT_EN = 1 << 0
    TSME_EN = 1 << 1
    ECC_EN = 1 << 2
    RAPL_DIS = 1 << 3
    CIPHERTEXT_HIDING_EN = 1 << 4
    ALIAS_CHECK_COMPLETE = 1 << 5
    TIO_EN = 1 << 7

    @property
    def smt_enabled(self) -> bool:
        return bool(self & self.SMT_EN)

    @property
    def tsme_enabled(self) -> bool:
        return bool(self & self.TSME_EN)

    @property
    def ecc_enabled(self) -> bool:
        return bool(self & self.ECC_EN)

    @property
    def rapl_disabled(self) -> bool:
        return bool(self & self.RAPL_DIS)

    @property
    def ciphertext_hiding_enabled(self) -> bool:
        return bool(self & self.CIPHERTEXT_HIDING_EN)

    @property
    def alias_check_complete(self) -> bool:
        return bool(self & self.ALIAS_CHECK_COMPLETE)

    @property
    def tio_enabled(self) -> bool:
        return bool(self & self.TIO_EN)


class SigningKey(IntEnum):
    """Which key signed the report (SIGNING_KEY, signer info bits 4:2)."""

    VCEK = 0
    VLEK = 1
    NONE = 7

    @property
    def label(self) -> str:
        """The name claims use: "vcek", "vlek" or "none"."""
        return self.name.lower()


_SIGNING_KEY_VALUES = frozenset(key.value for key in SigningKey)


class SignerInfo(int):
    """The u32 at 0x48: AUTHOR_KEY_EN (bit 0), MASK_CHIP_KEY (bit 1), SIGNING_KEY (bits 4:2)."""

    @classmethod
    def build(
        cls, signing_key: SigningKey, *, mask_chip_key: bool = False, author_key_en: bool = False
    ) -> SignerInfo:
        return cls(signing_key << 2 | int(mask_chip_key) << 1 | int(author_key_en))

    @classmethod
    def parse(cls, value: int) -> SignerInfo:
        """Refuse set reserved bits 31:5 and the reserved signing keys 2–6."""
        if value >> 5:
            raise MalformedEvidence(
                Reason.MALFORMED_REPORT, f"signer info {value:#x} sets reserved bits 31:5"
            )
        if (value >> 2) & 0b111 not in _SIGNING_KEY_VALUES:
            raise MalformedEvidence(
                Reason.MALFORMED_REPORT,
                f"signer info {value:#x} names reserved signing key {(value >> 2) & 0b111}",
            )
        return cls(value)

    @property
    def author_key_en(self) -> bool:
        return bool(self & 1)

    @property
    def mask_chip_key(self) -> bool:
        return bool(self >> 1 & 1)

    @property
    def signing_key(self) -> SigningKey:
        return SigningKey((self >> 2) & 0b111)


@functools.lru_cache(maxsize=256)
def _tcb_version(data: bytes, layout: TcbLayout) -> TcbVersion:
    """Decoded TCB versions kept by their 8 bytes and layout (every byte the decoding reads).

    A fleet reports a handful of them, four in every report, and the value is frozen.
    """
    return TcbVersion._decode(data, layout)


@dataclass(frozen=True)
class CpuId:
    """Combined CPUID family, model and stepping of the chip (v3+ reports)."""

    family: int
    model: int
    stepping: int


@dataclass(frozen=True)
class FirmwareVersion:
    """An SNP firmware version: major.minor and build."""

    major: int
    minor: int
    build: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor} build {self.build}"


@dataclass(frozen=True)
class Report:
    """One ATTESTATION_REPORT, every field of it.

    `tcb_layout` is how the four TCB fields were decoded: from the CPUID family for v3+ reports,
    from the given product or else the chip-id rule for v2 reports (which do not name their
    product). `cpuid` is None before v3, the mitigation vectors are None before v5.
    """

    version: int
    guest_svn: int
    policy: GuestPolicy
    family_id: bytes
    image_id: bytes
    vmpl: int
    signature_algo: int
    current_tcb: TcbVersion
    platform_info: PlatformInfo
    signer_info: SignerInfo
    report_data: bytes
    measurement: bytes
    host_data: bytes
    id_key_digest: bytes
    author_key_digest: bytes
    report_id: bytes
    report_id_ma: bytes
    reported_tcb: TcbVersion
    cpuid: CpuId | None
    chip_id: bytes
    committed_tcb: TcbVersion
    current: FirmwareVersion
    committed: FirmwareVersion
    launch_tcb: TcbVersion
    launch_mit_vector: int | None
    current_mit_vector: int | None
    signature_r: int
    signature_s: int
    tcb_layout: TcbLayout

    def __post_init__(self) -> None:
        # Programs building reports may pass plain integers for the bit fields.
        object.__setattr__(self, "policy", GuestPolicy(self.policy))
        object.__setattr__(self, "platform_info", PlatformInfo(self.platform_info))
        object.__setattr__(self, "signer_info", SignerInfo(self.signer_info))

    @property
    def product(self) -> Product | None:
        """The product CPUID names (v3+); None for v2 or a part this code does not know."""
        if self.cpuid is None:
            return None
        return Product.from_cpuid(self.cpuid.family, self.cpuid.model)

    @property
    def signing_key(self) -> SigningKey:
        return self.signer_info.signing_key

    @property
    def signed_bytes(self) -> bytes:
        """Bytes 0x000..0x29F, which the VCEK/VLEK signature covers."""
        return self.to_bytes()[:SIGNED_SIZE]

    @classmethod
    def from_bytes(cls, data: bytes, *, product: Product | None = None) -> Report:
        """Parse a report; `product` picks the TCB layout of a v2 report (else the chip-id rule).

        Raises MalformedEvidence: MALFORMED_REPORT_LENGTH for anything but 1184 bytes,
        MALFORMED_REPORT for an unsupported version, reserved bits set or a reserved signer.
        """
        data = bytes(data)
        version, guest_svn, policy = _checked_layout(data)
        cpuid = CpuId(*data[_CPUID : _CPUID + 3]) if version >= CPUID_SINCE_VERSION else None
        chip_id = data[_CHIP_ID : _CHIP_ID + CHIP_ID_SIZE]
        layout = _choose_tcb_layout(cpuid, product, chip_id)
        vmpl, signature_algo = struct.unpack_from("<II", data, _VMPL)
        platform_info, signer_info = struct.unpack_from("<QI", data, _PLATFORM_INFO)
        mit_vectors = version >= MITIGATION_VECTORS_SINCE_VERSION

        def tcb(offset: int) -> TcbVersion:
            return TcbVersion.from_bytes(data[offset : offset + TCB_SIZE], layout)

        def firmware(offset: int) -> FirmwareVersion:
            build, minor, major = data[offset : offset + 3]
            return FirmwareVersion(major=major, minor=minor, build=build)

        def u64(offset: int) -> int:
            return int.from_bytes(data[offset : offset + 8], "little")

        def signature(offset: int) -> int:
            return int.from_bytes(data[offset : offset + SIGNATURE_COMPONENT_SIZE], "little")

        # Every field is made here with its final type, so they are put in place at once rather
        # than through the frozen __init__ (one object.__setattr__ each, then __post_init__):
        # 9 µs of the 50 that verifying a report costs beside its signature check.
        report = object.__new__(cls)
        report.__dict__.update(
            version=version,
            guest_svn=guest_svn,
            policy=GuestPolicy(policy),
            family_id=data[_FAMILY_ID : _FAMILY_ID + 16],
            image_id=data[_IMAGE_ID : _IMAGE_ID + 16],
            vmpl=vmpl,
            signature_algo=signature_algo,
            current_tcb=tcb(_CURRENT_TCB),
            platform_info=PlatformInfo(platform_info),
            signer_info=SignerInfo.parse(signer_info),
            report_data=data[_REPORT_DATA : _REPORT_DATA + 64],
            measurement=data[_MEASUREMENT : _MEASUREMENT + 48],
            host_data=data[_HOST_DATA : _HOST_DATA + 32],
            id_key_digest=data[_ID_KEY_DIGEST : _ID_KEY_DIGEST + 48],
            author_key_digest=data[_AUTHOR_KEY_DIGEST : _AUTHOR_KEY_DIGEST + 48],
            report_id=data[_REPORT_ID : _REPORT_ID + 32],
            report_id_ma=data[_REPORT_ID_MA : _REPORT_ID_MA + 32],
            reported_tcb=tcb(_REPORTED_TCB),
            cpuid=cpuid,
            chip_id=chip_id,
            committed_tcb=tcb(_COMMITTED_TCB),
            current=firmware(_CURRENT_VERSION),
            committed=firmware(_COMMITTED_VERSION),
            launch_tcb=tcb(_LAUNCH_TCB),
            launch_mit_vector=u64(_LAUNCH_MIT_VECTOR) if mit_vectors else None,
            current_mit_vector=u64(_CURRENT_MIT_VECTOR) if mit_vectors else None,
            signature_r=signature(_SIGNATURE_R),
            signature_s=signature(_SIGNATURE_S),
            tcb_layout=layout,
        )
        return report

    def to_bytes(self) -> bytes:
        """The 1184 bytes of this report (exactly those it was parsed from).

        Raises ValueError when a field does not fit its place (only programs build reports).
        """
        out = bytearray(REPORT_SIZE)
        try:
            struct.pack_into("<IIQ", out, _VERSION, self.version, self.guest_svn, self.policy)
            struct.pack_into("<II", out, _VMPL, self.vmpl, self.signature_algo)
            struct.pack_into("<QI", out, _PLATFORM_INFO, self.platform_info, self.signer_info)
            if self.launch_mit_vector is not None:
                struct.pack_into("<Q", out, _LAUNCH_MIT_VECTOR, self.launch_mit_vector)
            if self.current_mit_vector is not None:
                struct.pack_into("<Q", out, _CURRENT_MIT_VECTOR, self.current_mit_vector)
            for offset, firmware in (
                (_CURRENT_VERSION, self.current),
                (_COMMITTED_VERSION, self.committed),
            ):
                out[offset : offset + 3] = bytes([firmware.build, firmware.minor, firmware.major])
            if self.cpuid is not None:
                cpuid = self.cpuid
                out[_CPUID : _CPUID + 3] = bytes([cpuid.family, cpuid.model, cpuid.stepping])
            for offset, tcb in (
                (_CURRENT_TCB, self.current_tcb),
                (_REPORTED_TCB, self.reported_tcb),
                (_COMMITTED_TCB, self.committed_tcb),
                (_LAUNCH_TCB, self.launch_tcb),
            ):
                if tcb.layout is not self.tcb_layout:
                    raise ValueError(f"TCB {tcb} does not use the report's {self.tcb_layout}")
                out[offset : offset + TCB_SIZE] = tcb.to_bytes()
            for offset, size, value in (
                (_FAMILY_ID, 16, self.family_id),
                (_IMAGE_ID, 16, self.image_id),
                (_REPORT_DATA, 64, self.report_data),
                (_MEASUREMENT, 48, self.measurement),
                (_HOST_DATA, 32, self.host_data),
                (_ID_KEY_DIGEST, 48, self.id_key_digest),
                (_AUTHOR_KEY_DIGEST, 48, self.author_key_digest),
                (_REPORT_ID, 32, self.report_id),
                (_REPORT_ID_MA, 32, self.report_id_ma),
                (_CHIP_ID, CHIP_ID_SIZE, self.chip_id),
            ):
                if len(value) != size:
                    raise ValueError(f"field at {offset:#x} must be {size} bytes")
                out[offset : offset + size] = value
            for offset, component in (
                (_SIGNATURE_R, self.signature_r),
                (_SIGNATURE_S, self.signature_s),
            ):
                out[offset : offset + SIGNATURE_COMPONENT_SIZE] = component.to_bytes(
                    SIGNATURE_COMPONENT_SIZE, "little"
                )
        except (struct.error, OverflowError) as error:
            raise ValueError(f"report field out of range: {error}") from None
        return bytes(out)


def _checked_layout(data: bytes) -> tuple[int, int, int]:
    """The report's version, guest SVN and policy, once its length, version and reserved bytes
    are checked: a report of another layout must not be read field by field as this one.

    The bytes a version does not define yet (CPUID before v3, mitigation vectors before v5) are
    reserved in it, and must be zero like the others.
    """
    if len(data) != REPORT_SIZE:
        raise MalformedEvidence(
            Reason.MALFORMED_REPORT_LENGTH,
            f"an SEV-SNP attestation report is {REPORT_SIZE} bytes, got {len(data)}",
            hint="pass the raw report, not hex, base64 or a wrapper such as an HCL report",
        )
    version, guest_svn, policy = struct.unpack_from("<IIQ", data, _VERSION)
    if version not in SUPPORTED_VERSIONS:
        raise MalformedEvidence(
            Reason.MALFORMED_REPORT,
            f"unsupported SEV-SNP report version {version} (supported: 2 to 5)",
        )
    reserved = list(_MUST_BE_ZERO)
    if version < CPUID_SINCE_VERSION:
        reserved.append((_CPUID, _CPUID + 3))
    if version < MITIGATION_VECTORS_SINCE_VERSION:
        reserved.append((_LAUNCH_MIT_VECTOR, _MIT_VECTORS_END))
    for start, end in reserved:
        if data.count(0, start, end) != end - start:
            raise MalformedEvidence(
                Reason.MALFORMED_REPORT,
                f"reserved bytes {start:#x}..{end - 1:#x} of a version {version} report"
                " are not zero",
            )
    return version, guest_svn, policy


def _choose_tcb_layout(cpuid: CpuId | None, product: Product | None, chip_id: bytes) -> TcbLayout:
    """CPUID family for v3+; else the given product; else virtee/sev's chip-id rule.

    On Turin only the first 8 bytes of CHIP_ID are used, so a chip id non-zero there and zero
    after it is taken as Turin. A zero chip id (MASK_CHIP_ID) keeps the older layout.
    """
    if cpuid is not None:
        known = Product.from_cpuid(cpuid.family, cpuid.model)
        if known is not None:
            return known.tcb_layout
        return TcbLayout.TURIN if cpuid.family >= 0x1A else TcbLayout.MILAN_GENOA
    if product is not None:
        return product.tcb_layout
    if any(chip_id[:TURIN_CHIP_ID_SIZE]) and not any(chip_id[TURIN_CHIP_ID_SIZE:]):
        return TcbLayout.TURIN
    return TcbLayout.MILAN_GENOA
