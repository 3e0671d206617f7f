"""The installer's own Python, copied to the node for the emulated runtime.

The emulated runtime's launcher runs Python with Contrast for every runc call that the policy
judges. A node has no such Python, so the installer brings its own (in the DaemonSet: the
node-installer image's Debian python3.11 with Contrast and regorus in its site-packages) into
the runtime's directory, `/opt/edgeless/<handler>/python-<digest>/`:

    bin/python3.11     the interpreter, unchanged
    bin/python         a sh wrapper: the bundle's own dynamic loader with `--library-path` (so the
                       image's glibc, libssl, libz… and never the node's), `--argv0` itself (so
                       `sys.executable`, which the TEE server is started with, is this wrapper
                       again), PYTHONHOME and PYTHONPATH set to the bundle
    so/                the loader and every shared library outside the bundle's trees that the
                       interpreter, the stdlib's extension modules and the site-packages' need,
                       as the loader's `--list` names them
    lib/python3.11/    the standard library (with lib-dynload and the image's precompiled .pyc)
    site-packages/     the directory holding `contrast` (and its dependencies)

No chroot: runc runs the launcher in the node's mount namespace and must see the node's paths
(bundles, the runtime's state, the pods' root file systems), so the bundle is relocated instead.
The directory is named after a digest of its content and made by one rename of a staged tree,
synced to disk first, so a present bundle is complete (after a crash too) and a re-run of the same
image copies nothing. An upgrade's installer
adds its own copy; `bundleprune` removes the others once no process uses them. Both hold an
`flock` on the handler's directory, so a staging directory seen under the lock is no install's
work in progress.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import secrets
import shutil
import site
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from contrast import syncfs
from contrast.nodeinstaller.errors import NodeInstallerError
from contrast.nodeinstaller.hostroot import Resolver

WRAPPER = "bin/python"
# The names a bundle's directory has in the handler's directory: complete (made by one rename),
# or not: being staged, or renamed aside to be deleted (`bundleprune`).
COMPLETE_NAME = re.compile(r"python-[0-9a-f]{16}")
PARTIAL_NAME = re.compile(r"\.python-[0-9a-f]{16}\.(?:staging|removing)-[0-9a-f]{8}")
# Parts of a stdlib that the runtime never imports and that only add bulk (and `config-*`, the
# static library and Makefile for building extensions).
_SKIPPED_STDLIB = frozenset({"site-packages", "dist-packages", "test", "idlelib", "ensurepip"})
_LIST_LINE = re.compile(r"^\s*(?:(\S+) => )?(/\S+) \(0x[0-9a-f]+\)$")
_WRAPPER_TEMPLATE = """\
#!/bin/sh
# Contrast's emulated runtime: the node installer's Python, relocated here (see pythonbundle.py).
home={home}
PYTHONHOME="$home" PYTHONPATH="$home/site-packages" PYTHONNOUSERSITE=1 \\
PYTHONDONTWRITEBYTECODE=1 exec "$home/so/{loader}" --library-path "$home/so" \\
    --argv0 "$home/{wrapper}" "$home/bin/{interpreter}" "$@"
"""


class BundleError(NodeInstallerError):
    """The installer's Python cannot be copied to the node."""


@dataclass(frozen=True)
class BundleFile:
    """One file of the bundle: where it goes (relative), where it is read, its mode."""

    relative: str
    source: Path
    mode: int


@dataclass(frozen=True)
class Bundle:
    """What the bundle holds (the wrapper comes on top) and its directory's name."""

    files: tuple[BundleFile, ...]
    interpreter: str
    loader: str
    digest: str

    @property
    def name(self) -> str:
        return f"python-{self.digest[:16]}"


def partial_name(name: str, kind: str) -> str:
    """A fresh name, never taken for a complete bundle, for `name` being staged or removed."""
    return f".{name}.{kind}-{secrets.token_hex(4)}"


@contextmanager
def locked(directory: int) -> Iterator[None]:
    """An exclusive `flock` on the handler's directory (`directory`, an open descriptor of it):
    one installer at a time stages, renames or removes bundles there."""
    descriptor = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # ends the lock


def _tree(source: Path, destination: str, skipped: frozenset[str]) -> Iterator[BundleFile]:
    """Every regular file below `source` (links followed), as files of `destination`."""
    for directory, subdirectories, names in os.walk(source, followlinks=True):
        relative = Path(directory).relative_to(source)
        if relative == Path(".") and skipped:
            subdirectories[:] = [
                d for d in subdirectories if d not in skipped and not d.startswith("config-")
            ]
        subdirectories.sort()
        for name in sorted(names):
            path = Path(directory) / name
            if path.is_file():
                mode = 0o755 if os.access(path, os.X_OK) else 0o644
                yield BundleFile(str(PurePosixPath(destination) / relative / name), path, mode)


def _loader() -> Path:
    """The dynamic loader this process runs under (from its own memory map)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[-1] if len(line.split()) >= 6 else ""
        if os.path.basename(path).startswith("ld-linux"):
            return Path(os.path.realpath(path))
    raise BundleError("the installer's dynamic loader is not in /proc/self/maps")


def _needed(loader: Path, elf: Path) -> dict[str, Path]:
    """The shared libraries `elf` needs, by name, as `loader --list` resolves them."""
    result = subprocess.run(  # noqa: S603 - the loader and an ELF file of our own tree
        [str(loader), "--list", str(elf)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        return {}  # not a dynamic object the loader can take (a static or foreign file)
    found = {}
    for line in result.stdout.splitlines():
        match = _LIST_LINE.match(line)
        if match is not None:
            path = Path(match.group(2))
            found[match.group(1) or path.name] = path
    return found


def _is_elf(path: Path) -> bool:
    with path.open("rb") as file:
        return file.read(4) == b"\x7fELF"


def site_directories() -> list[Path]:
    """Where `contrast` is (the image's dist-packages), then the site directories (a checkout's
    editable install keeps its dependencies there); the first of a name wins, as on sys.path."""
    import contrast  # noqa: PLC0415 - where this very package is installed

    sites = [Path(contrast.__file__).resolve().parents[1]]
    return sites + [Path(s).resolve() for s in site.getsitepackages() if Path(s).is_dir()]


def describe_bundle(sites: Sequence[Path] | None = None) -> Bundle:
    """The bundle of the running interpreter (the files, not yet copied) and its digest; its
    site-packages from `sites` (default: `site_directories()`)."""
    interpreter = Path(os.path.realpath(sys.executable))
    stdlib = Path(sysconfig.get_path("stdlib"))
    sites = site_directories() if sites is None else list(sites)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    files = [BundleFile(f"bin/{interpreter.name}", interpreter, 0o755)]
    files += _tree(stdlib, f"lib/{version}", _SKIPPED_STDLIB)
    taken = {file.relative for file in files}
    for directory in dict.fromkeys(sites):
        for file in _tree(directory, "site-packages", frozenset()):
            if file.relative not in taken:
                taken.add(file.relative)
                files.append(file)
    loader = _loader()
    libraries: dict[str, Path] = {}
    for file in list(files):
        if _is_elf(file.source):
            libraries.update(_needed(loader, file.source))
    trees = (stdlib.resolve(), *sites)
    for name, path in sorted(libraries.items()):
        real = Path(os.path.realpath(path))
        if real == loader or any(real.is_relative_to(tree) for tree in trees):
            continue  # the loader is added once below; a wheel's own libraries are in its tree
        files.append(BundleFile(f"so/{name}", real, 0o755))
    files.append(BundleFile(f"so/{loader.name}", loader, 0o755))
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.relative}\0{file.mode:o}\0".encode())
        digest.update(hashlib.sha256(file.source.read_bytes()).digest())
    return Bundle(tuple(files), interpreter.name, loader.name, digest.hexdigest())


def wrapper_script(home: PurePosixPath, bundle: Bundle) -> bytes:
    """The `bin/python` of a bundle installed at `home` (a node path)."""
    return _WRAPPER_TEMPLATE.format(
        home=home, loader=bundle.loader, wrapper=WRAPPER, interpreter=bundle.interpreter
    ).encode()


def install_bundle(
    host: Resolver, install_dir: PurePosixPath, sites: Sequence[Path] | None = None
) -> tuple[PurePosixPath, bool]:
    """The installer's Python in `install_dir` on the node: its wrapper's node path, and whether
    it was copied now (False: the same bundle was there already)."""
    bundle = describe_bundle(sites)
    home = install_dir / bundle.name
    wrapper = home / WRAPPER
    parent, _ = host.directory(install_dir, create=True)
    with locked(parent):
        try:
            os.stat(bundle.name, dir_fd=parent, follow_symlinks=False)
            return wrapper, False
        except FileNotFoundError:
            pass
        _copy(bundle, parent, home)
    return wrapper, True


def _copy(bundle: Bundle, parent: int, home: PurePosixPath) -> None:
    """Stage the bundle beside its place (in `parent`, the handler's directory), rename it in."""
    staging = partial_name(bundle.name, "staging")
    os.mkdir(staging, 0o755, dir_fd=parent)
    staged = Path(f"/proc/self/fd/{parent}") / staging  # made just now: no links in it
    file_systems = syncfs.FileSystems() if syncfs.available() else None
    try:
        if file_systems is not None:
            file_systems.add(staged)  # before the first write there (syncfs's docstring)
        for file in bundle.files:
            target = staged / file.relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file.source, target)
            os.chmod(target, file.mode)
        (staged / WRAPPER).write_bytes(wrapper_script(home, bundle))
        os.chmod(staged / WRAPPER, 0o755)  # noqa: S103 (runc, as root, runs it; not secret)
        os.chmod(staged, 0o755)  # noqa: S103 (as /opt/edgeless/<handler> itself)
        _sync(staged, file_systems)  # the name says complete: so must the disk, after a crash
        os.rename(staging, bundle.name, src_dir_fd=parent, dst_dir_fd=parent)
        os.fsync(parent)
    except OSError as error:
        raise BundleError(
            f"cannot copy the installer's Python to {home}: {error.strerror or error}"
        ) from None
    finally:
        if file_systems is not None:
            file_systems.close()
        shutil.rmtree(staged, ignore_errors=True)


def _sync(staged: Path, file_systems: syncfs.FileSystems | None) -> None:
    """Every file and directory of the staged tree on disk: one `syncfs`, or where it cannot
    report errors (Linux before 5.8) an `fsync` of each."""
    if file_systems is not None:
        file_systems.sync()
        return
    for directory, _, names in os.walk(staged):
        for path in [directory, *(os.path.join(directory, name) for name in names)]:
            descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
