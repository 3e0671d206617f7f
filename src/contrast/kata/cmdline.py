"""The guest kernel command line Kata's Go runtime gives QEMU for a configuration.

It is measured (SNP: SHA-256 in the SEV hash table; TDX: RTMR2), so it must be predicted byte for
byte. The rules are those of kata-containers/kata-containers at commit
7c6ba40c54ea29b459b4997cff948caaba4e658b, QEMU on amd64 (`layout.KATA_SOURCE_COMMIT`):

1. `virtcontainers/qemu_amd64.go` `kernelParams` (+ `intel_iommu=on iommu=pt` with
   `enable_iommu`), then the root device from `hypervisor.go` `GetKernelRootParams` when booting
   an image (`qemu_arch_base.go` `handleImagePath`, called in `newQemuArch`; a confidential guest
   never uses NVDIMM, so the disk is virtio-blk `/dev/vda1`, and `kernel_verity_params` turn it
   into a `dm-mod.create` verity target), then the console (`appendConsole`: `hvc0 hvc1`, or
   `ttyS0` with `use_legacy_serial`), then `quiet` (`debug` with `enable_debug`) and, with an
   image, systemd's status switches;
2. `qemu.go` `kernelParameters`: `panic=1`, `selinux=0|1` (`nr_cpus` only for non-confidential
   guests), then the configured parameters, which `katautils/config.go` `SetKernelParams` builds
   as: systemd's unit and masks when booting an image (`create.go` `getKernelParams`),
   `scsi_mod.scan=none` for virtio-scsi, the agent's parameters (`kata_agent.go`
   `KataAgentKernelParams`), then `kernel_params` of the file, split as `KernelParamFields` does;
3. each parameter is `key=value`, `key` alone when the value is empty (`SerializeParams`).

Two inputs are not in the configuration and make the line, and so the launch measurement, differ:
a host in FIPS mode adds `fips=1` (`create.go` `checkForFIPS`), and a pod may set the
`kernel_params` annotation where `enable_annotations` allows it. Neither is predicted: a VM
started that way does not match the reference values and is not admitted.
"""

from __future__ import annotations

from dataclasses import dataclass

from contrast.kata.config import HypervisorSettings
from contrast.kata.errors import KataReleaseError

ARCH_PARAMS = (
    ("tsc", "reliable"), ("no_timer_check", ""), ("rcupdate.rcu_expedited", "1"),
    ("i8042.direct", "1"), ("i8042.dumbkbd", "1"), ("i8042.nopnp", "1"), ("i8042.noaux", "1"),
    ("noreplace-smp", ""), ("reboot", "k"), ("cryptomgr.notests", ""), ("net.ifnames", "0"),
    ("pci", "lastbus=0"),
)  # fmt: skip
IOMMU_PARAMS = (("intel_iommu", "on"), ("iommu", "pt"))
SYSTEMD_UNIT_PARAMS = (
    ("systemd.unit", "kata-containers.target"),
    ("systemd.mask", "systemd-networkd.service"),
    ("systemd.mask", "systemd-networkd.socket"),
)
ROOT_DEVICE = "/dev/vda1"
HASH_DEVICE = "/dev/vda2"
VERITY_SECTOR = 512
DEBUG_CONSOLE_VPORT = "1026"

Param = tuple[str, str]


@dataclass(frozen=True)
class _Verity:
    root_hash: str
    salt: str
    data_blocks: int
    data_block_size: int
    hash_block_size: int


def _verity(params: str) -> _Verity | None:
    """`ParseKernelVerityParams`: comma-separated `key=value`, all five keys required."""
    if not params.strip():
        return None
    values: dict[str, str] = {}
    for raw in params.split(","):
        field = raw.strip()
        if not field:
            continue
        key, separator, value = field.partition("=")
        if not separator:
            raise KataReleaseError(f"kernel_verity_params entry {field!r} is not key=value")
        values[key] = value

    def number(key: str) -> int:
        text = values.get(key, "")
        if not text.isdigit() or int(text) == 0:
            raise KataReleaseError(
                f"kernel_verity_params {key} is missing or not a positive number"
            )
        return int(text)

    if not values.get("root_hash") or not values.get("salt"):
        raise KataReleaseError("kernel_verity_params lacks root_hash or salt")
    verity = _Verity(
        values["root_hash"],
        values["salt"],
        number("data_blocks"),
        number("data_block_size"),
        number("hash_block_size"),
    )
    if verity.data_block_size % VERITY_SECTOR or verity.hash_block_size % VERITY_SECTOR:
        raise KataReleaseError(
            f"kernel_verity_params block sizes must be multiples of {VERITY_SECTOR}"
        )
    return verity


def root_params(rootfs_type: str, verity_params: str) -> list[Param]:
    """`GetKernelRootParams` for a virtio-blk disk without DAX (every confidential guest)."""
    flags = {"ext4": "data=ordered,errors=remount-ro ro", "xfs": "ro", "erofs": "ro"}.get(
        rootfs_type
    )
    if flags is None:
        raise KataReleaseError(f"rootfs_type {rootfs_type!r} is not one Kata supports")
    verity = _verity(verity_params)
    if verity is None:
        return [("root", ROOT_DEVICE), ("rootflags", flags), ("rootfstype", rootfs_type)]
    sectors = verity.data_block_size // VERITY_SECTOR * verity.data_blocks
    target = (
        f"dm-verity,,,ro,0 {sectors} verity 1 {ROOT_DEVICE} {HASH_DEVICE}"
        f" {verity.data_block_size} {verity.hash_block_size} {verity.data_blocks} 0 sha256"
        f" {verity.root_hash} {verity.salt}"
    )
    return [
        ("dm-mod.create", f'"{target}"'),
        ("root", "/dev/dm-0"),
        ("rootflags", flags),
        ("rootfstype", rootfs_type),
    ]


def param_fields(text: str) -> list[str]:
    """`KernelParamFields`: split at spaces outside double quotes."""
    fields, start, quoted = [], 0, False
    for index, character in enumerate(text):
        if character == '"':
            quoted = not quoted
        elif character == " " and not quoted:
            if field := text[start:index].strip():
                fields.append(field)
            start = index + 1
    if field := text[start:].strip():
        fields.append(field)
    return fields


def _deserialize(fields: list[str]) -> list[Param]:
    """`DeserializeParams`; an empty key is refused, as `AddKernelParam` refuses it."""
    params = []
    for field in fields:
        key, _, value = field.partition("=")
        if not key:
            raise KataReleaseError(f"kernel_params entry {field!r} has no name")
        params.append((key, value))
    return params


def serialize(params: list[Param]) -> str:
    parts = []
    for key, value in params:
        if not key and not value:
            continue
        parts.append(value if not key else key if not value else f"{key}={value}")
    return " ".join(parts)


def agent_params(settings: HypervisorSettings) -> list[Param]:
    params: list[Param] = []
    if settings.agent_debug:
        params.append(("agent.log", "debug"))
    if settings.agent_trace:
        params.append(("agent.trace", "true"))
    if settings.agent_debug_console:
        params += [("agent.debug_console", ""), ("agent.debug_console_vport", DEBUG_CONSOLE_VPORT)]
    if settings.agent_cdh_api_timeout:
        params.append(("agent.cdh_api_timeout", str(settings.agent_cdh_api_timeout)))
    if settings.agent_launch_process_timeout:
        params.append(("agent.launch_process_timeout", str(settings.agent_launch_process_timeout)))
    if settings.agent_visible_cdi_devices:
        params.append(("agent.visible_cdi_devices", "true"))
    return params


def kernel_command_line(settings: HypervisorSettings) -> str:
    """The `-append` argument of the QEMU that Kata starts for `settings` (see module doc)."""
    image = bool(settings.image)
    params: list[Param] = list(ARCH_PARAMS)
    if settings.iommu:
        params += IOMMU_PARAMS
    if image:
        params += root_params(settings.rootfs_type, settings.kernel_verity_params)
    params += (
        [("console", "ttyS0")]
        if settings.legacy_serial
        else [("console", "hvc0"), ("console", "hvc1")]
    )
    if settings.debug:
        params.append(("debug", ""))
        if image:
            params += [("systemd.show_status", "true"), ("systemd.log_level", "debug")]
    else:
        params.append(("quiet", ""))
        if image:
            params.append(("systemd.show_status", "false"))
    params.append(("panic", "1"))
    params.append(("selinux", "0" if settings.disable_guest_selinux else "1"))
    if image:
        params += SYSTEMD_UNIT_PARAMS
    if settings.block_device_driver == "virtio-scsi":
        params.append(("scsi_mod.scan", "none"))
    params += agent_params(settings)
    params += _deserialize(param_fields(settings.kernel_params))
    return serialize(params)
