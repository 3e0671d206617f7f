"""The Kata runtime configuration the shim reads (`options.ConfigPath` in containerd's config).

The original patches Kata's upstream `configuration-qemu-{snp,tdx}.toml`; this renders the subset
that differs from Kata's defaults or that Contrast depends on (research/contrast.md §8): the paths
of the VMM, kernel, initrd or IGVM, rootfs image and firmware under the runtime's install directory,
the guest kernel command line from the runtime description, confidential guest on, the VM's
default memory (§2.4), and every debug switch off. The output is deterministic, so an unchanged
runtime renders unchanged bytes and a second installer run writes nothing.
"""

from __future__ import annotations

from typing import Any

import tomli_w

from contrast.attestation.tee import Tee
from contrast.nodeinstaller.errors import NodeInstallerError
from contrast.platforms import Hypervisor, Platform
from contrast.runtimedescription.model import (
    RUNTIME_NAME_PLACEHOLDER,
    ArtefactRole,
    RuntimeDescription,
    install_path,
)

HEADER = (
    "# Kata Containers configuration of runtime {name}.\n"
    "# Written by the Contrast node installer; changes are overwritten on the next install.\n\n"
)
DEFAULT_VCPUS = 1


def render_template(template: bytes, runtime_name: str) -> bytes:
    """A built runtime's Kata configuration (`contrast.kata.config.render`) for its handler.

    The template is the release's own configuration with every path under
    `/opt/edgeless/@@runtimeName@@/`; nothing else changes, so the kernel command line that
    `runtime build` predicted from it is the one the shim gives QEMU.
    """
    try:
        text = template.decode()
    except UnicodeDecodeError as error:
        raise NodeInstallerError(f"the Kata configuration template is not UTF-8: {error}") from None
    header = HEADER.format(name=runtime_name)
    return (header + text.replace(RUNTIME_NAME_PLACEHOLDER, runtime_name)).encode()


def render_kata_config(
    platform: Platform, description: RuntimeDescription, runtime_name: str
) -> bytes:
    """The Kata configuration TOML of `platform`'s stand-in runtime installed as `runtime_name`.

    Built runtimes carry their configuration (`render_template`); this renders the subset the
    stand-in descriptions imply.
    """

    def path_of(role: ArtefactRole) -> str | None:
        artefact = description.by_role(role)
        return None if artefact is None else install_path(artefact.path, runtime_name)

    vmm = path_of(ArtefactRole.VMM)
    if vmm is None:
        raise NodeInstallerError(f"platform {platform.name} runs no VM and has no Kata config")
    hypervisor: dict[str, Any] = {"path": vmm, "valid_hypervisor_paths": [vmm]}
    for key, role in (
        ("kernel", ArtefactRole.KERNEL),
        ("initrd", ArtefactRole.INITRD),
        ("image", ArtefactRole.ROOTFS),
        ("firmware", ArtefactRole.FIRMWARE),
        ("igvm", ArtefactRole.IGVM),
    ):
        value = path_of(role)
        if value is not None:
            hypervisor[key] = value
    hypervisor |= {
        "kernel_params": description.kernel_params,
        "confidential_guest": True,
        "default_vcpus": DEFAULT_VCPUS,
        "default_memory": platform.default_memory_mib,
        "shared_fs": "none",
        "disable_image_nvdimm": True,
        "enable_debug": False,
    }
    if platform.tee is Tee.SNP:
        hypervisor["sev_snp_guest"] = True
    if platform.hypervisor is Hypervisor.QEMU:
        hypervisor["machine_type"] = "q35"
    if platform.gpu:
        # GPUs are passed through at VM creation (CDI annotations), not hot-plugged later.
        hypervisor["cold_plug_vfio"] = "root-port"
    document = {
        "hypervisor": {str(platform.hypervisor): hypervisor},
        "agent": {"kata": {"enable_debug": False, "debug_console_enabled": False}},
        "runtime": {
            "enable_debug": False,
            "internetworking_model": "tcfilter",
            "disable_guest_seccomp": True,
            "sandbox_cgroup_only": True,
            "static_sandbox_resource_mgmt": True,
            "enable_pprof": False,
        },
    }
    return (HEADER.format(name=runtime_name) + tomli_w.dumps(document)).encode()
