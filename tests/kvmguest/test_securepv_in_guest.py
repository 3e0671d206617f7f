"""The secure-pv volume opened, mounted and written inside a guest with Debian's kernel.

This host's kernel has no device-mapper (tests/initializer tests what runs without it). Here a
qemu guest boots Debian's `linux-image-amd64` kernel (dm-crypt, dm-integrity and ext4 as Debian
builds them) with the Initializer release image as its userland, and runs `contrast initializer`
as a `secure-pv` pod's injected container runs it (inguest/initializer.py says what is brought in
instead of asked for: the Coordinator's answer), on a virtio disk at `/dev/csi0`. Three boots on
one disk: the first formats it (LUKS2 with HMAC-SHA256 integrity, the original's options), makes
ext4, mounts it on /state and writes a file; the second, with the same workload secret, opens it
again and reads the file back; the third, with the secret of another workload-secret-id, fails
to open it with the program's one-line error and never mounts it. The workload secrets are
derived here as the Coordinator derives them (SeedEngine.workload_secret).

On a host whose /dev/kvm is PVM (this one: a VM without nested virtualization), the stock kernel
cannot run under it and qemu emulates the CPU instead (guest.accelerator), which makes each boot
take minutes instead of seconds; on a host with KVM proper it boots under KVM.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from contrast.seed.engine import SeedEngine
from tests.kvmguest import guest
from tests.kvmguest.guest import Boot

if (reason := guest.missing()) is not None:
    pytest.fail(reason, pytrace=False)

SEED = SeedEngine(bytes(range(64)), bytes(range(32)))
WORKLOAD = "apps/v1/StatefulSet/default/mysql"
OTHER_WORKLOAD = "apps/v1/StatefulSet/default/vault"
DISK_BYTES = 64 << 20


@pytest.fixture(scope="module")
def booted(release_layout: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Boot]:
    """The three boots on one disk, in order (built or taken from the cache first)."""
    started = time.monotonic()
    built = guest.build(guest.initializer_image(release_layout))
    print(f"guest built or cached in {time.monotonic() - started:.1f} s")
    disk = tmp_path_factory.mktemp("kvmguest") / "csi0.img"
    with disk.open("wb") as file:
        file.truncate(DISK_BYTES)
    boots = [
        guest.boot(
            built, disk, SEED.workload_secret(WORKLOAD), write=f"written at boot {os.getpid()}"
        ),
        guest.boot(built, disk, SEED.workload_secret(WORKLOAD)),
        guest.boot(built, disk, SEED.workload_secret(OTHER_WORKLOAD)),
    ]
    for number, boot in enumerate(boots, 1):
        print(f"boot {number} ({boot.accelerator}): {boot.seconds:.1f} s")
    return boots


def test_the_first_boot_formats_opens_mounts_and_writes(booted: list[Boot]) -> None:
    first = booted[0]
    assert first.value("kernel").endswith("-amd64")
    assert not first.values("module-failed"), first.console
    assert first.value("luks-at-boot") == "1"  # not LUKS yet: the Initializer formats it
    mapper, fstype = first.value("mounted").split()
    assert mapper.startswith("/dev/mapper/")
    assert fstype == "ext4"
    status = first.values("status")
    assert "type:    LUKS2" in status
    assert "cipher:  aes-xts-plain64" in status
    assert "integrity: hmac(sha256)" in status
    assert "sector size:  4096" in status
    assert first.values("read-absent") == [""]
    assert first.value("wrote").startswith("written at boot ")
    assert first.value("initializer-exit") == "0"  # SIGTERM ends it cleanly, as the kubelet's
    assert first.value("closed") == "0"


def test_the_same_workload_secret_reopens_and_reads_it_back(booted: list[Boot]) -> None:
    first, second = booted[0], booted[1]
    assert second.value("luks-at-boot") == "0"  # formatted by the first boot: not again
    assert second.value("mounted") == first.value("mounted")  # the same mapping name
    assert second.value("read") == first.value("wrote")
    assert second.value("initializer-exit") == "0"


def test_another_workloads_secret_cannot_open_it(booted: list[Boot]) -> None:
    third = booted[2]
    assert third.value("luks-at-boot") == "0"
    assert third.value("initializer-exit") == "1"
    assert third.value("initializer-error") == (
        "contrast: opening the volume failed: No key available with this passphrase."
    )
    assert not third.values("mounted")
    assert not third.values("read")
