"""The platforms Contrast runs on: which TEE, which hypervisor, how much a VM costs.

The runtime class of a platform is `contrast-cc-<platform>-<hash>`, where the hash identifies the
runtime (kernel, image, firmware, VMM, shim, installer) so that several versions can be installed
side by side (research/contrast.md §2.3). The hash is derived from the runtime description and
the node installer's source (`contrast.runtimedescription.digest`), as the original derives it
from the node-installer image's layers and source. `runtime_class_name` is that of the
description shipped with this release; a runtime built from a Kata release (`contrast runtime
build`) has its own, which `generate` takes from the reference values the build wrote.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum

from contrast.attestation.tee import Tee
from contrast.errors import ContrastError
from contrast.runtimedescription import model
from contrast.runtimedescription.digest import runtime_hash_of
from contrast.runtimedescription.shipped import load_runtime

RUNTIME_CLASS_PREFIX = model.RUNTIME_CLASS_PREFIX
SHIM_MEMORY_MIB = 70
VMM_MEMORY_MIB = 100


class Hypervisor(StrEnum):
    QEMU = "qemu"
    CLOUD_HYPERVISOR = "clh"
    NONE = "none"  # the emulated platforms run workloads as local processes


class PlatformError(ContrastError):
    """An unknown platform or runtime class name."""


@dataclass(frozen=True)
class Platform:
    name: str  # lower case, as in runtime class names: "metal-qemu-snp"
    display_name: str  # as in the manifest's `Platform` field: "Metal-QEMU-SNP"
    tee: Tee
    hypervisor: Hypervisor
    gpu: bool = False
    emulated: bool = False
    bare_metal: bool = False

    @property
    def default_memory_mib(self) -> int:
        """Kata's `default_memory`: what the VM gets beyond the containers' limits."""
        return 1024 if self.gpu else 512

    @property
    def pod_overhead_mib(self) -> int:
        """`overhead.podFixed.memory` of the RuntimeClass: VM memory plus shim and VMM."""
        return self.default_memory_mib + SHIM_MEMORY_MIB + VMM_MEMORY_MIB

    @property
    def runtime_class_name(self) -> str:
        return f"{RUNTIME_CLASS_PREFIX}-{self.name}-{runtime_hash(self)}"

    @property
    def placeholder(self) -> str:
        """The runtime class users write to ask for this platform explicitly."""
        return f"{RUNTIME_CLASS_PREFIX}-{self.name}"


@functools.cache
def runtime_hash(platform: Platform) -> str:
    """8 hex characters naming this release's runtime for `platform`, derived from its content
    (the shipped description and the installer's source) on first use."""
    return runtime_hash_of(load_runtime(platform.name))


PLATFORMS: tuple[Platform, ...] = (
    Platform("aks-clh-snp", "AKS-CLH-SNP", Tee.SNP, Hypervisor.CLOUD_HYPERVISOR),
    Platform("metal-qemu-snp", "Metal-QEMU-SNP", Tee.SNP, Hypervisor.QEMU, bare_metal=True),
    Platform("metal-qemu-tdx", "Metal-QEMU-TDX", Tee.TDX, Hypervisor.QEMU, bare_metal=True),
    Platform(
        "metal-qemu-snp-gpu", "Metal-QEMU-SNP-GPU", Tee.SNP, Hypervisor.QEMU, gpu=True,
        bare_metal=True,
    ),
    Platform(
        "metal-qemu-tdx-gpu", "Metal-QEMU-TDX-GPU", Tee.TDX, Hypervisor.QEMU, gpu=True,
        bare_metal=True,
    ),
    Platform("k3s-qemu-snp", "K3s-QEMU-SNP", Tee.SNP, Hypervisor.QEMU, bare_metal=True),
    Platform("k3s-qemu-tdx", "K3s-QEMU-TDX", Tee.TDX, Hypervisor.QEMU, bare_metal=True),
    Platform("emulated-snp", "Emulated-SNP", Tee.SNP, Hypervisor.NONE, emulated=True),
    Platform("emulated-tdx", "Emulated-TDX", Tee.TDX, Hypervisor.NONE, emulated=True),
)  # fmt: skip
_BY_NAME = {platform.name: platform for platform in PLATFORMS}


def by_name(name: str) -> Platform:
    """A platform by its name, ignoring case (`Metal-QEMU-SNP` and `metal-qemu-snp` alike)."""
    platform = _BY_NAME.get(name.lower())
    if platform is None:
        known = ", ".join(p.name for p in PLATFORMS)
        raise PlatformError(f"unknown platform {name!r}", hint=f"one of: {known}")
    return platform


def from_runtime_class(runtime_class: str) -> Platform | None:
    """The platform a Contrast runtime class names, or None for `contrast-cc` and others.

    Accepts the placeholder (`contrast-cc-metal-qemu-snp`) and a versioned name
    (`contrast-cc-metal-qemu-snp-1a2b3c4d`, of this or another release).
    """
    prefix = f"{RUNTIME_CLASS_PREFIX}-"
    if not runtime_class.startswith(prefix):
        return None
    rest = runtime_class[len(prefix) :]
    # Longest name first, so that "metal-qemu-snp-gpu" wins over "metal-qemu-snp".
    for platform in sorted(PLATFORMS, key=lambda p: len(p.name), reverse=True):
        if rest == platform.name:
            return platform
        suffix = rest[len(platform.name) + 1 :]
        if rest.startswith(f"{platform.name}-") and _is_hash(suffix):
            return platform
    return None


def _is_hash(text: str) -> bool:
    return len(text) == 8 and all(c in "0123456789abcdef" for c in text)
