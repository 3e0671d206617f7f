"""Where a Kata static release keeps each file, and which configuration serves which platform.

Facts from kata-containers/kata-containers at `KATA_SOURCE_COMMIT`:

- `tools/packaging/kata-deploy/local-build/kata-deploy-binaries.sh`: everything is installed under
  the prefix `/opt/kata` (tarball members `./opt/kata/...`); the merged release is
  `kata-static-<version>-<arch>.tar.zst` (`tools/packaging/release/release.sh`; releases before
  3.21.0 were `.tar.xz`, commit ad240a39e6), with the version in `opt/kata/VERSION`.
- `tools/packaging/static-build/shim-v2/build.sh` and `src/runtime/Makefile`: the Go shim
  `bin/containerd-shim-kata-v2` and `bin/kata-runtime`; the rendered configurations in
  `share/defaults/kata-containers/configuration-<hypervisor>[-<variant>].toml`, with every asset
  path absolute (`FIRMWARESNPPATH = share/ovmf/AMDSEV.fd`, `FIRMWARETDVFPATH =
  share/ovmf/OVMF.inteltdx.fd`, kernels and images in `share/kata-containers/`, QEMU flavours
  `bin/qemu-system-x86_64[-snp-experimental|-tdx-experimental]`) and the dm-verity root hash of
  the measured image in `kernel_verity_params`.
- `tools/packaging/static-build/qemu/build-base-qemu.sh` and `scripts/configure-hypervisor.sh`:
  each QEMU flavour is built with `--disable-relocatable` and `--datadir=/opt/kata/share/<name>`,
  `<name>` being `kata-qemu` or `kata-qemu-<suffix>`: installed elsewhere, QEMU finds its option
  ROMs only when told with `-L`.
- `tools/packaging/static-build/ovmf/build-ovmf.sh`: OVMF for SNP is `share/ovmf/AMDSEV.fd` (the
  AmdSev build, with SEV metadata and the kernel-hashes table), TDVF `share/ovmf/OVMF.inteltdx.fd`.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from contrast.kata.errors import KataReleaseError
from contrast.platforms import Hypervisor, Platform

KATA_SOURCE_COMMIT = "7c6ba40c54ea29b459b4997cff948caaba4e658b"
PREFIX = PurePosixPath("/opt/kata")
CONFIG_DIRECTORY = PurePosixPath("share/defaults/kata-containers")
SHIM = PurePosixPath("bin/containerd-shim-kata-v2")
KATA_RUNTIME = PurePosixPath("bin/kata-runtime")
VERSION_FILE = PurePosixPath("VERSION")
QEMU_PROGRAM = "qemu-system-x86_64"
QEMU_DATA_PREFIX = "kata-qemu"
# The parts of the release a runtime can use: everything else (other VMMs, virtiofsd, nydus, the
# tools) is left in the archive when it is unpacked.
NEEDED_DIRECTORIES = (
    PurePosixPath("bin"),
    CONFIG_DIRECTORY,
    PurePosixPath("share/ovmf"),
    PurePosixPath("share/kata-containers"),
)
NEEDED_DATA_PREFIX = f"share/{QEMU_DATA_PREFIX}"

# Which configuration of the Go runtime each platform uses (src/runtime/Makefile CONFIG_QEMU_*).
CONFIG_FILES = {
    "metal-qemu-snp": "configuration-qemu-snp.toml",
    "k3s-qemu-snp": "configuration-qemu-snp.toml",
    "metal-qemu-tdx": "configuration-qemu-tdx.toml",
    "k3s-qemu-tdx": "configuration-qemu-tdx.toml",
    "metal-qemu-snp-gpu": "configuration-qemu-nvidia-gpu-snp.toml",
    "metal-qemu-tdx-gpu": "configuration-qemu-nvidia-gpu-tdx.toml",
}


def config_file(platform: Platform) -> PurePosixPath:
    """The release's configuration of `platform`, relative to the prefix."""
    if platform.emulated:
        raise KataReleaseError(
            f"{platform.display_name} runs workloads as local processes: no runtime to build",
            hint="choose a hardware platform, e.g. metal-qemu-snp",
        )
    if platform.hypervisor is Hypervisor.CLOUD_HYPERVISOR:
        raise KataReleaseError(
            f"{platform.display_name} cannot be built from a Kata release: it boots an IGVM image"
            " with Cloud Hypervisor, which the release does not ship",
            hint="build the QEMU platforms (metal-qemu-snp, metal-qemu-tdx, ...) from it",
        )
    return CONFIG_DIRECTORY / CONFIG_FILES[platform.name]


def qemu_data_directory(qemu: PurePosixPath) -> PurePosixPath:
    """The data directory a QEMU flavour was built for: `share/kata-qemu[-<suffix>]`."""
    name = qemu.name
    if name == QEMU_PROGRAM:
        return PurePosixPath("share") / QEMU_DATA_PREFIX
    if name.startswith(f"{QEMU_PROGRAM}-"):
        return PurePosixPath("share") / f"{QEMU_DATA_PREFIX}-{name[len(QEMU_PROGRAM) + 1 :]}"
    raise KataReleaseError(
        f"the hypervisor {qemu} is not one of the release's QEMU builds ({QEMU_PROGRAM}[-suffix])"
    )


def is_needed(relative: str) -> bool:
    """Whether a file under the prefix (`bin/...`, normalised) can belong to a runtime (the rest is
    not unpacked). A string, not a path: a PurePosixPath interns each of its names, and a tarball
    of millions of skipped members would grow the interpreter's table of them."""
    return (
        relative == str(VERSION_FILE)
        or any(
            relative == str(directory) or relative.startswith(f"{directory}/")
            for directory in NEEDED_DIRECTORIES
        )
        or relative.startswith(NEEDED_DATA_PREFIX)
    )


def is_sibling_link(target: str) -> bool:
    """Whether a symlink's target is a name beside the link, the only links a release has: the
    kernel build's `ln -sf vmlinuz-<version> vmlinuz<suffix>.container` (and `vmlinux...`), the
    image builder's `kata-containers<suffix>.img -> <image>` and `configuration.toml ->
    configuration-<hypervisor>.toml`, each made inside the directory it links in."""
    return target not in ("", ".", "..") and "/" not in target and "\0" not in target
