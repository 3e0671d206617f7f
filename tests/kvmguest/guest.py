"""A KVM guest with Debian's kernel and the Initializer image as its userland, booted by qemu.

`build` assembles the kernel and the initramfs once per input and keeps them under
~/.cache/contrast/kvmguest/<hash> (the hash covers the kernel package's checksum, the image's
manifest digest, busybox and the guest's scripts, so any change builds anew). `boot` starts
qemu with KVM on one data disk (virtio-blk, the pod's block device) and an archive of that boot's
inputs appended to the cached initramfs, and returns what `/init` reported on the serial console.
qemu and /dev/kvm are required: CI installs qemu through scripts/system-deps.sh.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.kvmguest import kernel
from tests.kvmguest.initramfs import GUEST_DIR, CpioWriter, ImageLayers, extra_archive, write_image

CACHE = Path(os.environ.get("CONTRAST_KVMGUEST_CACHE", Path.home() / ".cache/contrast/kvmguest"))
GUEST_FILES = Path(__file__).parent / "inguest"
BUSYBOX = Path("/bin/busybox")
QEMU = "qemu-system-x86_64"
KVM = Path("/dev/kvm")
PVM = Path("/sys/module/kvm_pvm")
MEMORY_MIB = 768
FORMAT = b"kvmguest 1"  # bump when the archive's layout changes in a way the inputs do not show
MARK = "KVMGUEST "


class GuestError(RuntimeError):
    """The guest could not be built or did not finish its boot."""


def missing() -> str | None:
    """Why no guest can boot here, or None."""
    if shutil.which(QEMU) is None:
        return f"{QEMU} is missing: run scripts/system-deps.sh (qemu-system-x86)"
    if not KVM.exists() or not os.access(KVM, os.R_OK | os.W_OK):
        return f"{KVM} is missing or not usable: the guest needs KVM"
    if not BUSYBOX.is_file():
        return f"{BUSYBOX} is missing: run scripts/system-deps.sh (busybox-static)"
    return None


def accelerator() -> str:
    """`kvm`, unless this host's KVM is PVM, which runs only guest kernels built for it.

    PVM (`kvm_pvm`, pagetable-based virtual machines, for hosts that are themselves VMs without
    nested virtualization) serves /dev/kvm but runs a guest kernel in ring 3, which a stock
    kernel cannot do: Debian's hangs right after the boot loader's EDD probe. There qemu emulates
    the CPU (`tcg`): the same kernel, devices and guest, only slower. CONTRAST_KVMGUEST_ACCEL
    overrides the choice.
    """
    chosen = os.environ.get("CONTRAST_KVMGUEST_ACCEL")
    if chosen:
        return chosen
    return "tcg" if PVM.is_dir() else "kvm"


@dataclass(frozen=True)
class Guest:
    vmlinuz: Path
    initramfs: Path
    release: str


@dataclass(frozen=True)
class Boot:
    """One boot: its console and the `KVMGUEST what value` reports, in order."""

    accelerator: str
    console: str
    reports: tuple[tuple[str, str], ...]
    seconds: float

    def values(self, what: str) -> list[str]:
        return [value for name, value in self.reports if name == what]

    def value(self, what: str) -> str:
        found = self.values(what)
        assert len(found) == 1, f"{what}: {found}\n{self.console[-6000:]}"
        return found[0]


def initializer_image(layout: Path) -> ImageLayers:
    """The Initializer image of a release layout, by the name the release gives it."""
    index = json.loads((layout / "index.json").read_text())
    for manifest in index["manifests"]:
        name = manifest.get("annotations", {}).get("org.opencontainers.image.ref.name", "")
        if name.rpartition(":")[0].endswith("/initializer"):
            return ImageLayers(layout, manifest["digest"])
    raise GuestError(f"{layout} holds no initializer image")


def _inputs_hash(image: ImageLayers, package: kernel.KernelPackage) -> str:
    digest = hashlib.sha256(FORMAT)
    for part in (package.sha256.encode(), image.digest.encode(), BUSYBOX.read_bytes()):
        digest.update(hashlib.sha256(part).digest())
    for path in sorted(GUEST_FILES.iterdir()):
        digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
    digest.update(" ".join(kernel.ROOT_MODULES).encode())
    return digest.hexdigest()[:24]


def build(image: ImageLayers, cache: Path = CACHE) -> Guest:
    """The guest's kernel and base initramfs, from `cache` or built into it."""
    debian = kernel.fetch(cache / "kernel")
    directory = cache / _inputs_hash(image, debian.package)
    guest = Guest(directory / "vmlinuz", directory / "initramfs.cpio", debian.package.release)
    if guest.initramfs.is_file():
        return guest
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="guest-", dir=cache) as temporary:
        staged = Path(temporary) / "guest"
        staged.mkdir()
        shutil.copyfile(debian.vmlinuz, staged / "vmlinuz")
        with (staged / "initramfs.cpio").open("wb") as output:
            writer = CpioWriter(output)
            write_image(writer, image)
            writer.directory(GUEST_DIR)
            writer.file(f"{GUEST_DIR}/busybox", BUSYBOX.read_bytes(), 0o755)
            writer.tree(debian.modules, f"{GUEST_DIR}/modules")
            writer.file(
                f"{GUEST_DIR}/initializer.py", (GUEST_FILES / "initializer.py").read_bytes()
            )
            writer.file(f"{GUEST_DIR}/modprobe", (GUEST_FILES / "modprobe").read_bytes(), 0o755)
            writer.file("init", (GUEST_FILES / "init").read_bytes(), 0o755)
            writer.finish()
        try:
            staged.rename(directory)
        except OSError:  # another run built the same guest meanwhile
            if not guest.initramfs.is_file():
                raise
    return guest


def boot(
    guest: Guest,
    disk: Path,
    workload_secret: bytes,
    *,
    write: str | None = None,
    timeout: float = 600.0,
) -> Boot:
    """Boot once with `disk` as the pod's device and `workload_secret` as the Coordinator's
    answer; `write`, if given, is what the guest writes to the volume's proof file."""
    files = {
        f"{GUEST_DIR}/answer.json": (
            json.dumps({"workload_secret": workload_secret.hex()}).encode(),
            0o400,
        )
    }
    if write is not None:
        files[f"{GUEST_DIR}/write"] = (write.encode(), 0o444)
    with tempfile.TemporaryDirectory(prefix="kvmguest-boot-") as temporary:
        initrd = Path(temporary) / "initrd"
        shutil.copyfile(guest.initramfs, initrd)
        with initrd.open("ab") as output:
            output.write(extra_archive(files, iter(())))
        accel = accelerator()
        command = [
            QEMU, "-accel", accel, "-cpu", "max" if accel == "tcg" else "host",
            "-smp", "1", "-m", str(MEMORY_MIB),
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-serial", "stdio", "-kernel", str(guest.vmlinuz), "-initrd", str(initrd),
            "-append", "console=ttyS0 panic=-1 loglevel=4 rdinit=/init",
            "-drive", f"file={disk},format=raw,if=virtio",
            "-device", "virtio-rng-pci",
        ]  # fmt: skip
        started = time.monotonic()
        try:
            done = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as expired:
            console = (expired.stdout or b"").decode(errors="replace")
            raise GuestError(
                f"the guest did not power off in {timeout:.0f} s:\n{console[-6000:]}"
            ) from None
        seconds = time.monotonic() - started
    console = done.stdout.decode(errors="replace").replace("\r", "")
    if done.returncode != 0:
        raise GuestError(
            f"qemu exited {done.returncode}: {done.stderr.decode()[-2000:]}\n{console[-4000:]}"
        )
    reports = tuple(
        tuple(line[len(MARK) :].partition(" ")[::2])
        for line in console.splitlines()
        if line.startswith(MARK)
    )
    return Boot(accel, console, reports, seconds)  # type: ignore[arg-type]
