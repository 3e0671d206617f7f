"""SNP launch digests: the MEASUREMENT a guest image gives, computed before it ever runs.

The digest is the SHA-384 PAGE_INFO chain of SNP LAUNCH_UPDATE over the OVMF pages, the OVMF SEV
metadata sections (with the SEV hash table of kernel, initrd and command line) and one VMSA page
per vCPU (AMD SEV-SNP ABI §8.17, research/attestation.md §5.1). We do not re-implement it: virtee's
`sev-snp-measure` is the tool the original Contrast runs (`calculateSnpLaunchDigest`, research §5.2:
`--mode snp --vcpu-type EPYC-Milan|EPYC-Genoa --ovmf --kernel --initrd --append`), and this module
is a typed front for its library API with errors a user can act on.

`sev-snp-measure` reads its inputs from paths, so the inputs here are paths too.

Everything the chain measures before the VMSA pages (the OVMF pages, the metadata sections with
the hash table of kernel, initrd and command line) is the same for every vCPU count and CPU model:
`launch_digests` measures it once (`_measure_image`: the library's own `OVMF`, `SevHashes` and
`snp_update_metadata_pages`, exactly as its `snp_calc_launch_digest` runs them) and continues the
chain from that digest (`GCTX(seed=...)`, as the library does for a precomputed OVMF hash) with
one more VMSA page per vCPU. One `calc_launch_digest` per (product, vCPU count) read and hashed
the kernel and initrd 16 times for the default entries (1.45 s for a release image, 16x one).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# sev-snp-measure ships no type information (no py.typed); its API is used in this module only.
from sevsnpmeasure import guest, vcpu_types
from sevsnpmeasure.gctx import GCTX
from sevsnpmeasure.ovmf import OVMF
from sevsnpmeasure.sev_hashes import SevHashes
from sevsnpmeasure.sev_mode import SevMode
from sevsnpmeasure.vmm_types import VMMType
from sevsnpmeasure.vmsa import VMSA

from contrast.attestation.errors import AttestationPackageError
from contrast.attestation.snp.report import Product

LAUNCH_DIGEST_SIZE = 48
# SEV_FEATURES of every VMSA: bit 0 SNPActive only. sev-snp-measure's CLI default (0.0.13), and so
# what the original's `calculateSnpLaunchDigest` measures, since it passes no --guest-features.
DEFAULT_GUEST_FEATURES = 0x1
# QEMU's CPU model per product, as the original passes them (research §5.2; `--vcpu-type`).
VCPU_TYPES = {Product.MILAN: "EPYC-Milan", Product.GENOA: "EPYC-Genoa", Product.TURIN: "EPYC-Turin"}
# Contrast's bare-metal defaults: a digest for each vCPU count a pod may ask for (research §3.4).
DEFAULT_VCPU_COUNTS = tuple(range(1, 9))
DEFAULT_PRODUCTS = (Product.MILAN, Product.GENOA)


class LaunchDigestError(AttestationPackageError):
    """The guest image cannot be measured (missing file, OVMF without SEV metadata, ...)."""


@dataclass(frozen=True)
class GuestImage:
    """What an SNP guest boots: firmware, and the kernel, initrd and command line it measures.

    `kernel` None measures a firmware-only boot (no SEV hash table; the kernel-hashes section is
    measured as zero pages). An `initrd` of None measures as the empty file, as QEMU does.
    """

    ovmf: Path
    kernel: Path | None = None
    initrd: Path | None = None
    cmdline: str = ""


def vcpu_signature(vcpu_type: str | Product) -> int:
    """CPUID(1).EAX of a QEMU CPU model ("EPYC-Milan", "EPYC-v4", ...) or of a product's model."""
    name = VCPU_TYPES[vcpu_type] if isinstance(vcpu_type, Product) else vcpu_type
    signature = vcpu_types.CPU_SIGS.get(name)
    if signature is None:
        known = ", ".join(sorted(vcpu_types.CPU_SIGS))
        raise LaunchDigestError(f"unknown vCPU type {name!r}", hint=f"one of: {known}")
    return int(signature)


def launch_digest(
    image: GuestImage,
    *,
    vcpus: int,
    vcpu_type: str | Product,
    guest_features: int = DEFAULT_GUEST_FEATURES,
) -> bytes:
    """The 48-byte MEASUREMENT of `image` launched by QEMU with `vcpus` vCPUs of `vcpu_type`."""
    _check_vcpus(vcpus)
    signature = vcpu_signature(vcpu_type)
    measured = _measure_image(image)
    return _with_vmsas(measured, signature, guest_features, (vcpus,))[vcpus]


@dataclass(frozen=True)
class LaunchDigest:
    product: Product
    vcpus: int
    digest: bytes


def launch_digests(
    image: GuestImage,
    *,
    products: Iterable[Product] = DEFAULT_PRODUCTS,
    vcpu_counts: Iterable[int] = DEFAULT_VCPU_COUNTS,
    guest_features: int = DEFAULT_GUEST_FEATURES,
) -> list[LaunchDigest]:
    """One digest per (product, vCPU count), products outermost, as the original lists them.

    The image is read and measured once, whatever the number of digests (module doc).
    """
    counts = tuple(vcpu_counts)
    for vcpus in counts:
        _check_vcpus(vcpus)
    signatures = [(product, vcpu_signature(product)) for product in products]
    if not counts or not signatures:
        return []
    measured = _measure_image(image)
    digests: list[LaunchDigest] = []
    for product, signature in signatures:
        by_count = _with_vmsas(measured, signature, guest_features, counts)
        digests.extend(LaunchDigest(product, vcpus, by_count[vcpus]) for vcpus in counts)
    return digests


def _check_vcpus(vcpus: int) -> None:
    if vcpus < 1:
        raise LaunchDigestError(f"vcpus must be at least 1, got {vcpus}")


@dataclass(frozen=True)
class _MeasuredImage:
    """The launch digest after the firmware and its metadata sections, before any VMSA page."""

    digest: bytes
    reset_eip: int  # where the APs start (the OVMF's SEV-ES reset block)


def _measure_image(image: GuestImage) -> _MeasuredImage:
    """`snp_calc_launch_digest` (sev-snp-measure 0.0.13) up to its VMSA pages, for QEMU."""
    for path in (image.ovmf, image.kernel, image.initrd):
        if path is not None and not Path(path).is_file():
            raise LaunchDigestError(
                f"{path}: no such file", hint="pass the guest image files the runtime installs"
            )
    try:
        ovmf = OVMF(str(image.ovmf))
        context = GCTX()
        context.update_normal_pages(ovmf.gpa(), ovmf.data())
        hashes = None
        if image.kernel is not None:
            initrd = None if image.initrd is None else str(image.initrd)
            hashes = SevHashes(str(image.kernel), initrd, image.cmdline)
        guest.snp_update_metadata_pages(context, ovmf, hashes, VMMType.QEMU)
        reset_eip = int(ovmf.sev_es_reset_eip())
    # sev-snp-measure reports a bad OVMF as RuntimeError/ValueError (wrong metadata signature,
    # unknown section type, missing footer table entries), a short file as struct errors, and a
    # section that is no whole number of pages as a failed `assert`.
    except (RuntimeError, ValueError, IndexError, OSError, struct.error, AssertionError) as error:
        raise LaunchDigestError(
            f"cannot measure {image.ovmf}: {error}",
            hint="the firmware must be an OVMF AmdSev build with SEV metadata and kernel hashes",
        ) from None
    return _MeasuredImage(bytes(context.ld()), reset_eip)


def _with_vmsas(
    measured: _MeasuredImage, signature: int, guest_features: int, counts: Iterable[int]
) -> dict[int, bytes]:
    """The digest for each vCPU count: the measured image's chain continued with one VMSA page
    per vCPU (the BSP's, then the APs'), each count's digest read off on the way."""
    wanted = set(counts)
    vmsa = VMSA(SevMode.SEV_SNP, measured.reset_eip, signature, guest_features, VMMType.QEMU)
    context = GCTX(seed=measured.digest)
    digests: dict[int, bytes] = {}
    for vcpus, page in enumerate(vmsa.pages(max(wanted)), start=1):
        context.update_vmsa_page(page)
        if vcpus in wanted:
            digest = bytes(context.ld())
            assert len(digest) == LAUNCH_DIGEST_SIZE
            digests[vcpus] = digest
    return digests
