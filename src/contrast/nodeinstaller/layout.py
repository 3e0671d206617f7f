"""Which files a platform's runtime consists of and where they go (research/contrast.md §8).

The release build stamps these files' digests into `runtimes/<platform>.json`; `standins.py` does
the same with placeholder files. Paths are relative to `/opt/edgeless/<handler>/`.
"""

from __future__ import annotations

from dataclasses import dataclass

from contrast.platforms import Hypervisor, Platform
from contrast.runtimedescription.model import ArtefactRole


@dataclass(frozen=True)
class ArtefactSlot:
    """An artefact before it is built: name, role, install path, and whether it is a program."""

    name: str
    role: ArtefactRole
    relative: str
    executable: bool = False


_KATA = (
    ArtefactSlot("containerd-shim", ArtefactRole.SHIM, "bin/containerd-shim-contrast-cc-v2", True),
    ArtefactSlot("kata-runtime", ArtefactRole.TOOL, "bin/kata-runtime", True),
    ArtefactSlot("rootfs", ArtefactRole.ROOTFS, "share/kata-containers.img"),
)
_QEMU = (
    ArtefactSlot("qemu", ArtefactRole.VMM, "bin/qemu-system-x86_64", True),
    ArtefactSlot("qemu-kvmvapic", ArtefactRole.VMM_DATA, "share/qemu/kvmvapic.bin"),
    ArtefactSlot("qemu-linuxboot-dma", ArtefactRole.VMM_DATA, "share/qemu/linuxboot_dma.bin"),
    ArtefactSlot("qemu-efi-virtio", ArtefactRole.VMM_DATA, "share/qemu/efi-virtio.rom"),
    ArtefactSlot("kernel", ArtefactRole.KERNEL, "share/kata-kernel"),
    ArtefactSlot("initrd", ArtefactRole.INITRD, "share/kata-initrd.zst"),
)
_CLOUD_HYPERVISOR = (
    ArtefactSlot("cloud-hypervisor", ArtefactRole.VMM, "bin/cloud-hypervisor", True),
    ArtefactSlot("igvm", ArtefactRole.IGVM, "share/kata-containers-igvm.img"),
)


def artefact_slots(platform: Platform) -> tuple[ArtefactSlot, ...]:
    """The files of `platform`'s runtime; none for the emulated platforms, which run no VM."""
    if platform.hypervisor is Hypervisor.NONE:
        return ()
    if platform.hypervisor is Hypervisor.CLOUD_HYPERVISOR:
        return _KATA + _CLOUD_HYPERVISOR
    firmware = ArtefactSlot("firmware", ArtefactRole.FIRMWARE, f"{platform.tee}/share/OVMF.fd")
    return (*_KATA, *_QEMU, firmware)


def kata_config_relative(platform: Platform) -> str | None:
    """Where the rendered Kata configuration goes, as in the original (`etc/configuration-…`)."""
    if platform.hypervisor is Hypervisor.NONE:
        return None
    return f"etc/configuration-{platform.hypervisor}-{platform.tee}.toml"
