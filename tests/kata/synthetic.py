"""A Kata static release of the real layout, made of small files, for the build tests.

Paths, file names, symlinks and configuration keys are those of kata-containers/kata-containers
at 7c6ba40c (see `contrast.kata.layout`): `./opt/kata/...` members, the Go shim, the SNP and TDX
QEMU flavours with their data directories, `share/ovmf/AMDSEV.fd` and `OVMF.inteltdx.fd`, the
confidential kernel and image behind their `*.container`/`*-confidential.img` symlinks, and the
configurations as `src/runtime/Makefile` renders them (values of `arch/amd64-options.mk`, the
dm-verity parameters of the measured image in `kernel_verity_params`).

Where a measurement needs real formats, the files have them: AMDSEV.fd is sev-snp-measure's own
OVMF fixture (its footer table and SEV metadata), OVMF.inteltdx.fd carries TDVF metadata with a
measured BFV, and the kernel is a PE/COFF image (Authenticode for RTMR1).
"""

from __future__ import annotations

import io
import lzma
import tarfile
from collections.abc import Iterable
from pathlib import Path

import zstandard

from contrast.attestation.tdx.measure import TdvfSection, TdvfSectionType
from tests.attestation.tdx.test_measure import _firmware, _pe

FIXTURES = Path(__file__).parents[1] / "attestation" / "snp" / "fixtures"
OVMF = FIXTURES / "ovmf_AmdSev_suffix.bin"
VERSION = "3.99.0-synthetic"
KERNEL = _pe(trailing=b"\x7fkernel " * 512)
KERNEL_NAME = "vmlinuz-6.12.8-150-confidential"
IMAGE_NAME = "kata-ubuntu-noble-confidential.image"
ROOT_HASH = "6a1c4fdbd9a5bf2a32cd0b4b9c6e8d47b5e1a0a2c9e3f3d3a0e4b2a1c0f9e8d7"
SALT = "d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2"
VERITY = (
    f"root_hash={ROOT_HASH},salt={SALT},data_blocks=65536,data_block_size=4096,hash_block_size=4096"
)
PREFIX = "/opt/kata"
QEMU_DATA = ("kvmvapic.bin", "linuxboot_dma.bin", "efi-virtio.rom", "firmware/60-edk2-x86_64.json")

CONFIG_TEMPLATE = """\
# Copyright (c) 2017-2019 Intel Corporation
# SPDX-License-Identifier: Apache-2.0
# XXX: Type: kata

[hypervisor.qemu]
path = "{prefix}/bin/{qemu}"
kernel = "{prefix}/share/kata-containers/vmlinuz-confidential.container"
image = "{prefix}/share/kata-containers/kata-containers-confidential.img"
machine_type = "q35"
rootfs_type = "ext4"
confidential_guest = true
{tee_keys}rootless = false
enable_annotations = [
    "enable_iommu", "kernel_params", "kernel_verity_params", "default_vcpus", "default_memory",
]
valid_hypervisor_paths = ["{prefix}/bin/{qemu}"]
kernel_params = "{kernel_params}"
kernel_verity_params = "{verity}"
firmware = "{prefix}/share/ovmf/{firmware}"
firmware_volume = ""
machine_accelerators = ""
cpu_features = "pmu=off"
default_vcpus = 1
default_maxvcpus = 0
default_memory = 2048
disable_block_device_use = false
shared_fs = "none"
block_device_driver = "virtio-scsi"
enable_iommu = false
enable_debug = false
disable_image_nvdimm = true
use_legacy_serial = false
disable_selinux = false
disable_guest_selinux = true

[agent.kata]
enable_debug = false
enable_tracing = false
kernel_modules = []
debug_console_enabled = false
dial_timeout = 90
launch_process_timeout = 6

[runtime]
enable_debug = false
internetworking_model = "tcfilter"
disable_guest_seccomp = true
sandbox_cgroup_only = false
static_sandbox_resource_mgmt = true
disable_guest_empty_dir = false
emptydir_mode = "block-encrypted"
experimental_force_guest_pull = false
"""
KERNEL_PARAMS = "cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1"


def tdvf() -> bytes:
    """A TDVF image: a measured BFV of two pages and an unmeasured CFV, with its footer table."""
    bfv = TdvfSection(0, 0x2000, 0xFFFFE000, 0x2000, TdvfSectionType.BFV, 1)
    cfv = TdvfSection(0x2000, 0x1000, 0xFFC00000, 0x1000, TdvfSectionType.CFV, 0)
    hob = TdvfSection(0, 0, 0x809000, 0x1000, TdvfSectionType.TD_HOB, 0)
    return _firmware([bfv, cfv, hob], bytes(range(256)) * 48)


def config(tee: str) -> str:
    snp = tee == "snp"
    return CONFIG_TEMPLATE.format(
        prefix=PREFIX,
        qemu=f"qemu-system-x86_64-{tee}-experimental",
        tee_keys=(
            'sev_snp_guest = true\nsnp_id_block = ""\nsnp_id_auth = ""\nsnp_guest_policy = 196608\n'
            if snp
            else "tdx_quote_generation_service_socket_port = 0\n"
        ),
        kernel_params=KERNEL_PARAMS,
        verity=VERITY,
        firmware="AMDSEV.fd" if snp else "OVMF.inteltdx.fd",
    )


def files(kernel: bytes = KERNEL) -> dict[str, bytes | str]:
    """Release paths below `opt/kata` → content (bytes) or symlink target (str)."""
    tree: dict[str, bytes | str] = {
        "VERSION": f"{VERSION}\n".encode(),
        "bin/containerd-shim-kata-v2": b"#!/bin/sh\necho containerd-shim-kata-v2 stand-in\n",
        "bin/kata-runtime": b"#!/bin/sh\necho kata-runtime stand-in\n",
        "bin/qemu-system-x86_64": b"\x7fELF qemu\n",
        "share/ovmf/AMDSEV.fd": OVMF.read_bytes(),
        "share/ovmf/OVMF.inteltdx.fd": tdvf(),
        "share/ovmf/OVMF.fd": b"plain OVMF, not for confidential guests\n",
        f"share/kata-containers/{KERNEL_NAME}": kernel,
        "share/kata-containers/vmlinuz-confidential.container": KERNEL_NAME,
        f"share/kata-containers/{IMAGE_NAME}": b"\xeb\x63\x90 image " * 1024,
        "share/kata-containers/kata-containers-confidential.img": IMAGE_NAME,
        "share/kata-containers/kata-containers.img": b"not the confidential image\n",
        "share/defaults/kata-containers/configuration-qemu.toml": b"[hypervisor.qemu]\n",
        "share/defaults/kata-containers/configuration.toml": "configuration-qemu.toml",
        "share/defaults/kata-containers/configuration-qemu-snp.toml": config("snp").encode(),
        "share/defaults/kata-containers/configuration-qemu-tdx.toml": config("tdx").encode(),
        "libexec/virtiofsd": b"\x7fELF virtiofsd\n",
    }
    for tee in ("snp", "tdx"):
        tree[f"bin/qemu-system-x86_64-{tee}-experimental"] = f"\x7fELF qemu {tee}\n".encode()
        for name in QEMU_DATA:
            tree[f"share/kata-qemu-{tee}-experimental/{name}"] = f"{name} ({tee})\n".encode()
    return tree


def write_tree(root: Path, tree: dict[str, bytes | str]) -> Path:
    """The release unpacked at `root` (`root/opt/kata/...`)."""
    prefix = root / "opt" / "kata"
    for relative, content in sorted(tree.items()):
        path = prefix / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.symlink_to(content)
        else:
            path.write_bytes(content)
            executable = relative.startswith(("bin/", "libexec/"))
            path.chmod(0o755 if executable else 0o644)
    return root


def _members(tree: dict[str, bytes | str]) -> Iterable[tuple[tarfile.TarInfo, bytes | None]]:
    directories = sorted({str(Path(p).parent) for p in tree} | {"."})
    for directory in ["opt", "opt/kata", *[f"opt/kata/{d}" for d in directories if d != "."]]:
        info = tarfile.TarInfo(f"./{directory}")
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        yield info, None
    for relative, content in sorted(tree.items()):
        info = tarfile.TarInfo(f"./opt/kata/{relative}")
        if isinstance(content, str):
            info.type, info.linkname = tarfile.SYMTYPE, content
            yield info, None
        else:
            info.size, info.mode = len(content), 0o755 if relative.startswith("bin/") else 0o644
            yield info, content


def tarball(tree: dict[str, bytes | str], path: Path, compression: str) -> Path:
    """The release as Kata publishes it: `zst` (since 3.21), `xz` (before) or `gz`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, content in _members(tree):
            archive.addfile(info, None if content is None else io.BytesIO(content))
    raw = buffer.getvalue()
    if compression == "zst":
        data = zstandard.ZstdCompressor().compress(raw)
    elif compression == "xz":
        data = lzma.compress(raw)
    else:
        import gzip

        data = gzip.compress(raw)
    path.write_bytes(data)
    return path
