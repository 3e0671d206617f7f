"""Removing the copies of the installer's Python that no process on the node uses any more.

Each installer image copies its Python to `/opt/edgeless/<handler>/python-<digest>/`
(`pythonbundle`, ~97 MB). An upgrade's installer adds its own copy, while the old one may still run
a pod's TEE server (started by the old launcher, with the old copy's wrapper as `sys.executable`)
or a runc call in flight. So once the launcher names the copy this installer runs, every other
bundle directory of the handler is removed if, and only if, no process uses it; one in use is kept
and a later install removes it.

A process uses a copy when its executable, working directory, root, an open file or a memory
mapping is in it, looked up both by path (the kernel's, as the node sees it: the handler's
directory as named and as its links lead) and by device and inode (whatever path the kernel
prints), or when its command line names a path in it (the wrapper is a `sh` script: only `sh`'s
arguments name it). The installer runs with hostPID, so `/proc` holds every process of the node,
those of pods included. A process the installer may not inspect (it lacks ptrace's read right over
it, which the DaemonSet's privileged root never does) is judged by its command line, readable by
all: every process that runs a copy's Python names the copy there. One whose command line cannot
be read either keeps every copy.

Removal never leaves a copy that looks complete but is not. A complete copy is a `python-<digest>`
directory (made by one rename); it is renamed aside to `.python-<digest>.removing-<random>`, the
rename made durable, the processes looked at once more (one that started on the copy in between
has it renamed back, whole), and only then deleted. A deletion cut short leaves the aside name,
and an install cut short its `.staging-` directory: both are partial copies, removed by a later
install when unused. Nothing else is touched: no other names in the handler's directory, no other
handler's directory, no links.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from contrast.nodeinstaller.hostroot import Resolver
from contrast.nodeinstaller.pythonbundle import (
    COMPLETE_NAME,
    PARTIAL_NAME,
    BundleError,
    locked,
    partial_name,
)

PROC = Path("/proc")
_LINKS = ("exe", "cwd", "root")


@dataclass(frozen=True)
class PruneReport:
    """What a prune did: node paths removed, the copies kept with a process using each, and the
    processes the installer had no right to inspect."""

    removed: tuple[str, ...]
    in_use: tuple[tuple[str, int], ...]
    uninspected: tuple[int, ...] = ()  # processes judged by their command line only


@dataclass(frozen=True)
class _Candidate:
    """A bundle directory that may go: its name, node paths, the (device, inode) of its files."""

    name: str
    prefixes: tuple[str, ...]
    inodes: frozenset[tuple[int, int]]

    def holds(self, path: str) -> bool:
        return any(path == prefix or path.startswith(f"{prefix}/") for prefix in self.prefixes)

    def named_in(self, argument: str) -> bool:
        return any(f"{prefix}/" in f"{argument}/" for prefix in self.prefixes)


@dataclass(frozen=True)
class _Aside(_Candidate):
    """A candidate under its aside name; `original` is the name it had."""

    original: str


def prune_bundles(
    host: Resolver,
    install_dir: PurePosixPath,
    launcher_python: PurePosixPath | None,
    *,
    proc: Path = PROC,
) -> PruneReport:
    """Remove the bundles in `install_dir` (a node path) that no process uses, except the one
    holding `launcher_python` (the Python the launcher now runs), if it is one."""
    try:
        parent, resolved = host.directory(install_dir, create=False)
    except FileNotFoundError:
        return PruneReport((), ())
    kept = _bundle_of(launcher_python, (install_dir, resolved))
    directories = (install_dir, resolved)
    view = Path(f"/proc/self/fd/{parent}")
    try:
        with locked(parent):
            candidates = [
                _candidate(view, name, directories)
                for name in _bundle_names(parent)
                if name != kept
            ]
            uninspected: set[int] = set()
            users = _users(candidates, proc, uninspected)
            unused = [c for c in candidates if c.name not in users]
            aside = _rename_aside(parent, unused, directories)
            late = _users(aside, proc, uninspected)  # started between the look and the rename
            for candidate in aside:
                if candidate.name in late:
                    _rename_back(parent, candidate, late, users)
            removed = []
            for candidate in aside:
                if candidate.name not in late:
                    shutil.rmtree(view / candidate.name)
                    removed.append(candidate.original)
    except OSError as error:
        raise BundleError(
            f"cannot remove the unused copies of the installer's Python in {install_dir}:"
            f" {error.strerror or error}",
            hint="a root-owned directory that cannot be removed: a read-only file system,"
            " a mount or an immutable file inside it",
        ) from None
    return PruneReport(
        tuple(str(install_dir / name) for name in removed),
        tuple(sorted((str(install_dir / name), pid) for name, pid in users.items())),
        tuple(sorted(uninspected)),
    )


def _bundle_of(python: PurePosixPath | None, directories: Iterable[PurePosixPath]) -> str | None:
    """The name of the bundle directory `python` lies in, if it lies in one of `directories`."""
    if python is None:
        return None
    for directory in directories:
        if python.is_relative_to(directory) and python != directory:
            return python.relative_to(directory).parts[0]
    return None


def _bundle_names(parent: int) -> Iterator[str]:
    """The bundle directories (complete or partial, never a link) in the handler's directory."""
    for name in sorted(os.listdir(parent)):
        if COMPLETE_NAME.fullmatch(name) or PARTIAL_NAME.fullmatch(name):
            status = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(status.st_mode):
                yield name


def _candidate(view: Path, name: str, directories: Iterable[PurePosixPath]) -> _Candidate:
    inodes = set()
    for directory, subdirectories, files in os.walk(view / name):
        for entry in [".", *subdirectories, *files]:
            status = os.stat(Path(directory) / entry, follow_symlinks=False)
            inodes.add((status.st_dev, status.st_ino))
    prefixes = tuple(dict.fromkeys(str(directory / name) for directory in directories))
    return _Candidate(name, prefixes, frozenset(inodes))


def _users(candidates: Sequence[_Candidate], proc: Path, uninspected: set[int]) -> dict[str, int]:
    """For each candidate some process uses, the pid of one such process; the pids that could
    be judged by their command line only are added to `uninspected`."""
    found: dict[str, int] = {}
    if not candidates:
        return found
    for entry in os.scandir(proc):
        if len(found) == len(candidates):
            break
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            process = _Process.read(Path(entry.path))
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended while being read
        except PermissionError:
            for candidate in candidates:  # not even its command line: cannot tell
                found.setdefault(candidate.name, pid)
            continue
        if not process.inspected:
            uninspected.add(pid)
        for candidate in candidates:
            if candidate.name not in found and process.uses(candidate):
                found[candidate.name] = pid
    return found


@dataclass(frozen=True)
class _Process:
    """What /proc shows of a process: its paths (links, open files, mappings), their (device,
    inode), its arguments, and whether more than the arguments could be read."""

    paths: tuple[str, ...]
    inodes: frozenset[tuple[int, int]]
    arguments: tuple[str, ...]
    inspected: bool

    @classmethod
    def read(cls, directory: Path) -> _Process:
        """Raises if the process is gone (FileNotFoundError, ProcessLookupError) or even its
        command line is unreadable (PermissionError). An entry a kernel thread or a zombie lacks
        (`exe`, an `fd/3` closed meanwhile) is skipped. The rest needs the right to inspect the
        process (ptrace's read mode: the DaemonSet's privileged root has it for every process);
        without it, only the command line is read, which every process running a copy's Python
        has naming the copy: the wrapper's `exec` puts the copy's loader, library directory and
        interpreter in it."""
        raw = (directory / "cmdline").read_bytes()
        arguments = tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)
        paths: list[str] = []
        inodes: set[tuple[int, int]] = set()
        try:
            links = [directory / name for name in _LINKS]
            links += [directory / "fd" / fd for fd in os.listdir(directory / "fd")]
            for link in links:
                try:
                    paths.append(os.readlink(link))
                    status = os.stat(link)
                except FileNotFoundError:
                    continue
                inodes.add((status.st_dev, status.st_ino))
            for line in (directory / "maps").read_text(errors="replace").splitlines():
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith("/"):
                    major, minor = (int(part, 16) for part in fields[3].split(":"))
                    inodes.add((os.makedev(major, minor), int(fields[4])))
                    paths.append(fields[5])
        except PermissionError:
            return cls((), frozenset(), arguments, inspected=False)
        return cls(tuple(paths), frozenset(inodes), arguments, inspected=True)

    def uses(self, candidate: _Candidate) -> bool:
        return (
            not candidate.inodes.isdisjoint(self.inodes)
            or any(candidate.holds(path) for path in self.paths)
            or any(candidate.named_in(argument) for argument in self.arguments)
        )


def _rename_aside(
    parent: int, unused: list[_Candidate], directories: Iterable[PurePosixPath]
) -> list[_Aside]:
    """Each unused complete copy under a name never taken for a complete one (partial copies
    have such a name already), durably, so a deletion cut short leaves no complete-looking copy."""
    aside = []
    for candidate in unused:
        name = candidate.name
        if COMPLETE_NAME.fullmatch(name):
            name = partial_name(name, "removing")
            os.rename(candidate.name, name, src_dir_fd=parent, dst_dir_fd=parent)
        # Its paths as well as the aside ones: a process that started in between may name either.
        prefixes = (*candidate.prefixes, *(str(directory / name) for directory in directories))
        aside.append(_Aside(name, tuple(dict.fromkeys(prefixes)), candidate.inodes, candidate.name))
    os.fsync(parent)
    return aside


def _rename_back(
    parent: int, candidate: _Aside, late: Mapping[str, int], users: dict[str, int]
) -> None:
    """A copy a process started on while it was being renamed aside: whole, so back in place."""
    if candidate.name != candidate.original:
        os.rename(candidate.name, candidate.original, src_dir_fd=parent, dst_dir_fd=parent)
        os.fsync(parent)
    users[candidate.original] = late[candidate.name]
