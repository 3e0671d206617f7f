"""The guest kernel command line, predicted as Kata's Go runtime (7c6ba40c) builds it for QEMU.

The expected lines are written out by hand from the Go sources named in `contrast.kata.cmdline`,
for the configurations Kata's Makefile renders (amd64 `KERNELPARAMS`, virtio-scsi, launch process
timeout 6, the measured image's dm-verity parameters) and for the switches that change the line.
"""

from __future__ import annotations

import dataclasses

import pytest

from contrast.kata import config
from contrast.kata.cmdline import kernel_command_line, param_fields, root_params
from contrast.kata.errors import KataReleaseError
from contrast.platforms import by_name
from tests.kata import synthetic

ARCH = (
    "tsc=reliable no_timer_check rcupdate.rcu_expedited=1 i8042.direct=1 i8042.dumbkbd=1"
    " i8042.nopnp=1 i8042.noaux=1 noreplace-smp reboot=k cryptomgr.notests net.ifnames=0"
    " pci=lastbus=0"
)
VERITY_ROOT = (
    'dm-mod.create="dm-verity,,,ro,0 524288 verity 1 /dev/vda1 /dev/vda2 4096 4096 65536 0 sha256'
    f' {synthetic.ROOT_HASH} {synthetic.SALT}" root=/dev/dm-0'
    " rootflags=data=ordered,errors=remount-ro ro rootfstype=ext4"
)
SYSTEMD = (
    "systemd.unit=kata-containers.target systemd.mask=systemd-networkd.service"
    " systemd.mask=systemd-networkd.socket"
)
RELEASE_SNP_LINE = (
    f"{ARCH} {VERITY_ROOT} console=hvc0 console=hvc1 quiet systemd.show_status=false panic=1"
    f" selinux=0 {SYSTEMD} scsi_mod.scan=none agent.launch_process_timeout=6"
    " cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1"
)


def settings(tee: str = "snp") -> config.HypervisorSettings:
    name = f"configuration-qemu-{tee}.toml"
    platform = by_name(f"metal-qemu-{tee}")
    return config.settings(config.parse(synthetic.config(tee), name), name, platform)


@pytest.mark.parametrize("tee", ["snp", "tdx"])
def test_release_configuration_gives_kata_s_line(tee: str) -> None:
    # The TDX configuration differs in KERNELTDXPARAMS only, which amd64 sets to the same values.
    assert kernel_command_line(settings(tee)) == RELEASE_SNP_LINE


def test_every_switch_changes_the_line_where_kata_puts_it() -> None:
    base = settings()
    change = dataclasses.replace
    assert kernel_command_line(change(base, legacy_serial=True)) == RELEASE_SNP_LINE.replace(
        "console=hvc0 console=hvc1", "console=ttyS0"
    )
    assert kernel_command_line(change(base, debug=True)) == RELEASE_SNP_LINE.replace(
        "quiet systemd.show_status=false",
        "debug systemd.show_status=true systemd.log_level=debug",
    )
    assert kernel_command_line(change(base, iommu=True)) == RELEASE_SNP_LINE.replace(
        "pci=lastbus=0", "pci=lastbus=0 intel_iommu=on iommu=pt"
    )
    assert kernel_command_line(change(base, disable_guest_selinux=False)) == (
        RELEASE_SNP_LINE.replace("selinux=0", "selinux=1")
    )
    assert kernel_command_line(change(base, block_device_driver="virtio-blk")) == (
        RELEASE_SNP_LINE.replace(" scsi_mod.scan=none", "")
    )
    agent = change(
        base, agent_debug=True, agent_trace=True, agent_debug_console=True,
        agent_cdh_api_timeout=50, agent_visible_cdi_devices=True,
    )  # fmt: skip
    assert kernel_command_line(agent) == RELEASE_SNP_LINE.replace(
        "agent.launch_process_timeout=6",
        "agent.log=debug agent.trace=true agent.debug_console agent.debug_console_vport=1026"
        " agent.cdh_api_timeout=50 agent.launch_process_timeout=6 agent.visible_cdi_devices=true",
    )


def test_an_initrd_boot_has_no_root_disk_and_no_systemd_switches() -> None:
    initrd = dataclasses.replace(settings(), image="", initrd="/opt/kata/share/kata-initrd.img")
    assert kernel_command_line(initrd) == (
        f"{ARCH} console=hvc0 console=hvc1 quiet panic=1 selinux=0 scsi_mod.scan=none"
        " agent.launch_process_timeout=6 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1"
    )


def test_root_without_verity_and_other_filesystems() -> None:
    assert root_params("ext4", "") == [
        ("root", "/dev/vda1"),
        ("rootflags", "data=ordered,errors=remount-ro ro"),
        ("rootfstype", "ext4"),
    ]
    assert root_params("erofs", "")[1] == ("rootflags", "ro")
    with pytest.raises(KataReleaseError, match="rootfs_type 'btrfs'"):
        root_params("btrfs", "")


def test_configured_params_split_outside_quotes_only() -> None:
    assert param_fields('  a=1  b="x y"   c ') == ["a=1", 'b="x y"', "c"]
    quoted = dataclasses.replace(settings(), kernel_params='foo="bar baz" qux')
    assert kernel_command_line(quoted).endswith('agent.launch_process_timeout=6 foo="bar baz" qux')


@pytest.mark.parametrize(
    ("verity", "message"),
    [
        ("root_hash=ab,salt=cd,data_blocks=1,data_block_size=4096", "hash_block_size"),
        ("root_hash=ab,data_blocks=1,data_block_size=4096,hash_block_size=4096", "salt"),
        ("root_hash=ab,salt=cd,data_blocks=1,data_block_size=100,hash_block_size=4096", "512"),
        ("root_hash", "not key=value"),
    ],
)
def test_bad_verity_parameters_are_refused(verity: str, message: str) -> None:
    with pytest.raises(KataReleaseError, match=message):
        kernel_command_line(dataclasses.replace(settings(), kernel_verity_params=verity))


def test_configurations_kata_cannot_boot_confidentially_are_refused() -> None:
    snp = by_name("metal-qemu-snp")
    text = synthetic.config("snp")
    cases = [
        (text.replace("confidential_guest = true", "confidential_guest = false"), "confidential"),
        (text.replace("sev_snp_guest = true", "sev_snp_guest = false"), "sev_snp_guest"),
        (text.replace('firmware_volume = ""', 'firmware_volume = "/opt/kata/x"'), "firmware_vol"),
        (text.replace("kernel = ", 'initrd = "/opt/kata/i"\nkernel = '), "exactly one"),
        (text.replace("[hypervisor.qemu]", "[hypervisor.clh]"), r"\[hypervisor.qemu\]"),
        (text.replace("snp_guest_policy = 196608", "snp_guest_policy = 720896"), "0x30000"),
    ]
    for broken, message in cases:
        with pytest.raises(KataReleaseError, match=message):
            config.settings(config.parse(broken, "c.toml"), "c.toml", snp)
    tdx = synthetic.config("tdx")
    with pytest.raises(KataReleaseError, match="sev_snp_guest"):
        config.settings(config.parse(tdx, "c.toml"), "c.toml", snp)
