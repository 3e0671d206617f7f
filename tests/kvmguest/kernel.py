"""The guest's kernel: Debian's own, taken from its package without installing it on the host.

`apt-get download` fetches the `linux-image-<release>-amd64` package that `linux-image-amd64`
depends on (the host's apt lists say which: no network is needed to name it), `dpkg-deb -x`
unpacks it into a scratch directory, and the kernel image and the modules the secure-pv guest
needs are kept: virtio for its disks, device-mapper with dm-crypt and dm-integrity, the crypto
that LUKS2 with `aes-xts-plain64` and `hmac-sha256` integrity asks the kernel for, and ext4 with
what its superblock checksums request. The package ships no `modules.dep` (its `postinst` runs
`depmod`, which is not run here), so one is written for the kept modules from their own
`depends=` fields (`modinfo`'s source, which `depmod` would reach through their symbols), and the
guest loads them in its order.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

META_PACKAGE = "linux-image-amd64"
# What the guest loads, in this order; each after what modules.dep says it needs.
ROOT_MODULES = (
    "virtio_pci",  # the PCI transport of every virtio device
    "virtio_blk",  # the data disk (the pod's block device)
    "virtio_rng",  # entropy for Argon2id's salt and the volume key at first boot
    "crc32c_generic",  # ext4's metadata checksums (the kernel asks for crc32c at mount)
    "ext4",
    "af_alg",
    "algif_skcipher",  # libcryptsetup encrypts the keyslot area through AF_ALG
    "algif_hash",
    "ecb",  # xts's soft dependency (modinfo softdep=pre: ecb), which modules.dep does not list
    "xts",
    "authenc",  # dm-crypt's AEAD: authenc(hmac(sha256),xts(aes)) for the integrity tags
    "dm_mod",
    "dm_crypt",
    "dm_integrity",
)
MODULES_DEP = "modules.dep"
LOAD_ORDER = "load-order"
_DEPENDS = re.compile(rb"(?:^|\x00)depends=([^\x00]*)\x00")


class KernelError(RuntimeError):
    """The Debian kernel could not be found, fetched or unpacked."""


@dataclass(frozen=True)
class KernelPackage:
    """The package that holds the kernel, as the host's apt lists describe it."""

    name: str
    version: str
    sha256: str

    @property
    def release(self) -> str:
        return self.name.removeprefix("linux-image-")


@dataclass(frozen=True)
class Kernel:
    """A kernel image and the modules directory the guest gets (`lib/modules/<release>`)."""

    package: KernelPackage
    vmlinuz: Path
    modules: Path

    def load_order(self) -> list[str]:
        """The modules' paths under `modules`, each after its dependencies."""
        return (self.modules / LOAD_ORDER).read_text().split()


def _apt(arguments: Sequence[str], cwd: Path | None = None) -> str:
    done = subprocess.run(list(arguments), capture_output=True, text=True, check=False, cwd=cwd)
    if done.returncode != 0:
        raise KernelError(f"{' '.join(arguments)} failed: {done.stderr.strip()}")
    return done.stdout


def kernel_package() -> KernelPackage:
    """The package `linux-image-amd64` depends on, with its version and checksum."""
    depends = _apt(["apt-cache", "depends", META_PACKAGE])
    names = re.findall(r"Depends: (linux-image-[0-9][^\s]*)", depends)
    if not names:
        raise KernelError(
            f"apt knows no {META_PACKAGE}: run apt-get update (scripts/system-deps.sh does)"
        )
    fields = dict(
        line.split(": ", 1)
        for line in _apt(["apt-cache", "show", "--no-all-versions", names[0]]).splitlines()
        if ": " in line and not line.startswith(" ")
    )
    return KernelPackage(names[0], fields["Version"], fields["SHA256"])


def module_name(path: str) -> str:
    """`kernel/drivers/md/dm-mod.ko` -> `dm_mod`, the name `depends=` and `lsmod` use."""
    return Path(path).name.split(".ko")[0].replace("-", "_")


def _depends(module: Path) -> list[str]:
    found = _DEPENDS.search(module.read_bytes())
    if found is None:
        raise KernelError(f"{module} has no modinfo depends= field")
    return [name.decode().replace("-", "_") for name in found.group(1).split(b",") if name]


def _closure(roots: Iterable[str], paths: dict[str, str], tree: Path) -> dict[str, list[str]]:
    """Each module needed by `roots` (built-in ones excepted) with its direct dependencies."""
    needed: dict[str, list[str]] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        if name not in paths:
            raise KernelError(f"the kernel has no module {name} (nor is it built in)")
        needed[name] = _depends(tree / paths[name])
        pending.extend(needed[name])
    return needed


def _deps_first(name: str, needed: dict[str, list[str]], seen: list[str]) -> list[str]:
    for dependency in needed[name]:
        if dependency not in seen:
            _deps_first(dependency, needed, seen)
    if name not in seen:
        seen.append(name)
    return seen


def write_modules(tree: Path, release: str, output: Path) -> None:
    """Copy the needed modules of the unpacked package `tree` to `output` with modules.dep.

    modules.dep lists every module's dependencies as `depmod` does, the ones to load last first;
    the load order (roots in ROOT_MODULES' order, each after its dependencies) is read back from
    it.
    """
    source = tree / "lib/modules" / release
    builtin = {module_name(line) for line in (source / "modules.builtin").read_text().split()}
    paths = {module_name(path): path for path in (source / "modules.order").read_text().split()}
    roots = [name for name in ROOT_MODULES if name not in builtin]
    needed = _closure(roots, paths, source)
    lines = []
    for name in sorted(needed):
        dependencies = _deps_first(name, needed, [])[:-1]
        lines.append(f"{paths[name]}: {' '.join(paths[d] for d in reversed(dependencies))}\n")
        (output / paths[name]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / paths[name], output / paths[name])
    (output / MODULES_DEP).write_text("".join(lines))
    (output / LOAD_ORDER).write_text("\n".join(load_order(output / MODULES_DEP, roots)) + "\n")


def load_order(modules_dep: Path, roots: Sequence[str]) -> list[str]:
    """The paths to load, from modules.dep: each root after its dependencies, none twice."""
    entries = {}
    for line in modules_dep.read_text().splitlines():
        path, _, dependencies = line.partition(":")
        entries[module_name(path)] = (path, dependencies.split())
    order: list[str] = []
    for root in roots:
        path, dependencies = entries[root]
        for item in [*reversed(dependencies), path]:
            if item not in order:
                order.append(item)
    return order


def fetch(cache: Path) -> Kernel:
    """The kernel of Debian's current `linux-image-amd64`, from `cache` or fetched into it."""
    package = kernel_package()
    kept = hashlib.sha256(" ".join(ROOT_MODULES).encode()).hexdigest()[:8]
    directory = cache / f"{package.name}_{package.version}_{kept}"
    vmlinuz = directory / "vmlinuz"
    modules = directory / "lib/modules" / package.release
    if not vmlinuz.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="kernel-", dir=cache) as temporary:
            scratch = Path(temporary)
            _apt(["apt-get", "download", "-q", f"{package.name}={package.version}"], cwd=scratch)
            (deb,) = scratch.glob("*.deb")
            _apt(["dpkg-deb", "-x", str(deb), str(scratch / "tree")])
            staged = scratch / "kernel"
            (staged / "lib/modules" / package.release).mkdir(parents=True)
            write_modules(
                scratch / "tree", package.release, staged / "lib/modules" / package.release
            )
            shutil.copyfile(
                scratch / "tree/boot" / f"vmlinuz-{package.release}", staged / "vmlinuz"
            )
            staged.rename(directory)
    return Kernel(package, vmlinuz, modules)
