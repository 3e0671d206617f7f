"""The platform's Kata configuration: what it boots, and the copy Contrast installs.

The release's own TOML (rendered by Kata's build with the release's paths and the measured image's
dm-verity root hash) is the source of truth: its `[hypervisor.qemu]` section names the QEMU,
kernel, image or initrd and firmware, and together with `[agent.kata]` determines the guest kernel
command line (`cmdline`). Contrast installs the same document with

- every asset path moved under the runtime's install directory (`@@runtimeName@@`, replaced by the
  node installer with the handler name),
- what `contrast generate`'s policies assume (research/kata-agent-policy-inputs.md §4.2): initdata
  accepted as a pod annotation (`cc_init_data` in `enable_annotations`; the agent takes its policy
  from initdata's `policy.rego`), images pulled in the guest (`experimental_force_guest_pull`),
  no shared file system, encrypted block-device emptyDirs,
- the VM's base memory that the RuntimeClass's pod overhead accounts for, and every debug switch
  off (debug also changes the kernel command line, and so the launch measurement).

tomlkit keeps the release's comments and order, so the installed file reads like Kata's. A
configuration nested more deeply than `tomldepth.MAX_DEPTH` levels is refused before any parser
reads it (Kata's own nest three).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from contrast.attestation.tee import Tee
from contrast.kata.errors import KataReleaseError
from contrast.nodeinstaller import tomldepth
from contrast.platforms import Platform

HYPERVISOR = "qemu"
AGENT = "kata"
INITDATA_ANNOTATION = "cc_init_data"
EMPTYDIR_MODE = "block-encrypted"
# The SNP guest policy Kata's SNP configuration sets (`snp_guest_policy = 196608`: bit 16 SMT,
# bit 17 reserved-must-be-one) and the one `manifest.defaults` pins (ABIMinor 0, SMT true).
SNP_GUEST_POLICY = 0x30000
# Keys whose values are paths of release files (`[hypervisor.qemu]`).
ASSET_KEYS = ("path", "kernel", "image", "initrd", "firmware")


@dataclass(frozen=True)
class HypervisorSettings:
    """The `[hypervisor.qemu]` and `[agent.kata]` values the boot and its measurement depend on."""

    qemu: str
    kernel: str
    image: str
    initrd: str
    firmware: str
    kernel_params: str
    kernel_verity_params: str
    rootfs_type: str
    block_device_driver: str
    legacy_serial: bool
    iommu: bool
    debug: bool
    disable_guest_selinux: bool
    agent_debug: bool
    agent_trace: bool
    agent_debug_console: bool
    agent_cdh_api_timeout: int
    agent_launch_process_timeout: int
    agent_visible_cdi_devices: bool


def parse(text: str, name: str) -> dict[str, Any]:
    """The configuration `name` as TOML, refused before parsing if it nests too deeply."""
    try:
        return tomldepth.loads(text)
    except tomldepth.TomlTooDeep as error:
        raise KataReleaseError(f"{name} is {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise KataReleaseError(f"{name} is not valid TOML: {error}") from None


def _section(document: dict[str, Any], name: str, *path: str) -> dict[str, Any]:
    node: Any = document
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        raise KataReleaseError(f"{name} has no [{'.'.join(path)}] section")
    return node


def settings(document: dict[str, Any], name: str, platform: Platform) -> HypervisorSettings:
    """The settings of a Kata configuration, refused if it is not a confidential QEMU VM of P."""
    hypervisor = _section(document, name, "hypervisor", HYPERVISOR)
    agent_tables = document.get("agent") or {}
    agent = agent_tables.get(AGENT) or {} if isinstance(agent_tables, dict) else {}

    def text(key: str, table: dict[str, Any] = hypervisor) -> str:
        value = table.get(key, "")
        if not isinstance(value, str):
            raise KataReleaseError(f"{name}: {key} is not a string")
        return value

    def flag(key: str, table: dict[str, Any] = hypervisor) -> bool:
        value = table.get(key, False)
        if not isinstance(value, bool):
            raise KataReleaseError(f"{name}: {key} is not true or false")
        return value

    def number(key: str, table: dict[str, Any]) -> int:
        value = table.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise KataReleaseError(f"{name}: {key} is not a non-negative integer")
        return value

    if not flag("confidential_guest"):
        raise KataReleaseError(f"{name} does not describe a confidential guest")
    if flag("sev_snp_guest") != (platform.tee is Tee.SNP):
        raise KataReleaseError(
            f"{name}: sev_snp_guest is {flag('sev_snp_guest')}, which does not fit"
            f" {platform.display_name}"
        )
    if platform.tee is Tee.SNP:
        policy = hypervisor.get("snp_guest_policy", SNP_GUEST_POLICY)
        if policy != SNP_GUEST_POLICY:
            raise KataReleaseError(
                f"{name}: snp_guest_policy is {policy!r}; Contrast's reference values pin"
                f" {SNP_GUEST_POLICY:#x} (ABI 0.0, SMT allowed, no debug, no migration agent)",
            )
    for unsupported in ("firmware_volume",):
        if text(unsupported):
            raise KataReleaseError(f"{name}: {unsupported} is set, which Contrast cannot measure")
    if hypervisor.get("guest_extension_images"):
        raise KataReleaseError(
            f"{name}: guest_extension_images are set; their verity parameters would join the"
            " kernel command line, which Contrast does not predict yet"
        )
    found = HypervisorSettings(
        qemu=text("path"),
        kernel=text("kernel"),
        image=text("image"),
        initrd=text("initrd"),
        firmware=text("firmware"),
        kernel_params=text("kernel_params"),
        kernel_verity_params=text("kernel_verity_params"),
        rootfs_type=text("rootfs_type") or "ext4",
        block_device_driver=text("block_device_driver") or "virtio-scsi",
        legacy_serial=flag("use_legacy_serial"),
        iommu=flag("enable_iommu"),
        debug=flag("enable_debug"),
        disable_guest_selinux=flag("disable_guest_selinux"),
        agent_debug=flag("enable_debug", agent),
        agent_trace=flag("enable_tracing", agent),
        agent_debug_console=flag("debug_console_enabled", agent),
        agent_cdh_api_timeout=number("cdh_api_timeout", agent),
        agent_launch_process_timeout=number("launch_process_timeout", agent),
        agent_visible_cdi_devices=flag("visible_cdi_devices", agent),
    )
    for key in ("qemu", "kernel", "firmware"):
        if not getattr(found, key):
            raise KataReleaseError(f"{name} names no {key}; {platform.display_name} needs one")
    if bool(found.image) == bool(found.initrd):
        raise KataReleaseError(f"{name} must name exactly one of image and initrd")
    return found


def render(
    text: str,
    name: str,
    platform: Platform,
    move: Callable[[str], str],
) -> str:
    """The release's configuration as Contrast installs it (see module doc).

    `move` maps each asset path the release names to its install path.
    """
    try:
        tomldepth.check_depth(text)
        document = tomlkit.parse(text)
        hypervisor: Any = document["hypervisor"][HYPERVISOR]
        for key in ASSET_KEYS:
            value = hypervisor.get(key)
            if isinstance(value, str) and value:
                hypervisor[key] = move(value)
        hypervisor["valid_hypervisor_paths"] = [str(hypervisor["path"])]
        annotations = [str(item) for item in hypervisor.get("enable_annotations", [])]
        if INITDATA_ANNOTATION not in annotations:
            annotations.append(INITDATA_ANNOTATION)
        hypervisor["enable_annotations"] = annotations
        hypervisor["shared_fs"] = "none"
        hypervisor["enable_debug"] = False
        hypervisor["default_memory"] = platform.default_memory_mib
        agent: Any = document.setdefault("agent", tomlkit.table()).setdefault(
            AGENT, tomlkit.table()
        )
        agent["enable_debug"] = False
        agent["enable_tracing"] = False
        agent["debug_console_enabled"] = False
        runtime: Any = document.setdefault("runtime", tomlkit.table())
        runtime["enable_debug"] = False
        runtime["experimental_force_guest_pull"] = True
        runtime["emptydir_mode"] = EMPTYDIR_MODE
        runtime["static_sandbox_resource_mgmt"] = True
        return tomlkit.dumps(document)
    except tomldepth.TomlTooDeep as error:
        raise KataReleaseError(f"{name} is {error}") from None
    except (TOMLKitError, KeyError, TypeError) as error:
        raise KataReleaseError(f"cannot render {name} for Contrast: {error}") from None
