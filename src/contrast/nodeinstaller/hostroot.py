"""Paths of the node, looked up inside the host root the way the node itself would see them.

The installer runs in a container with the node's `/` mounted at `--host-root`. A symlink in the
node's file system means what it means on the node: `/etc/containerd/config.toml ->
/etc/containerd/real.toml` names the host's `real.toml`, not the installer's, and `/opt ->
/var/opt` keeps the runtime inside the host root. So every path is resolved as `openat2(2)`'s
`RESOLVE_IN_ROOT` does: component by component from the host root, an absolute link target
starts again at the host root, `..` never climbs above it, and at most `MAX_LINKS` links are
followed (Linux's own bound, `ELOOP` beyond it).

This is done here, in Python, with one `openat` per component (`O_NOFOLLOW`, relative to the
directory descriptor of the component before), rather than with `openat2` itself: `openat2`
needs Linux 5.6 and is refused by the seccomp profiles of older container runtimes, and the
installer needs more than opening (creating directories, renaming staged files into place), each
of which is then one `*at` call on a descriptor this walk returned. Every step opens a real
directory without following a link, and `..` pops the walk's own stack instead of asking the
file system, so a link can never lead outside the host root; a directory moved out of the host
root while the walk holds it is the one race left (openat2 detects it; nothing on a node moves
its `/etc` or `/opt` while it runs an installer). The tests hold this resolver to the kernel's
`RESOLVE_IN_ROOT` on many trees of links.

Where a link ends in a file: config files are read and replaced at the link's target (the link
stays; `resolve(..., follow=True)`), the runtime's own files are replaced as the name they have
(`follow=False`: a link in the install directory is replaced by the file, never written through).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from contrast.nodeinstaller.errors import NodeInstallerError

MAX_LINKS = 40  # Linux's MAXSYMLINKS: `open` fails with ELOOP after following 40 links
DIRECTORY_MODE = 0o755
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


class HostPathError(NodeInstallerError):
    """A host path cannot be resolved inside the host root (a link loop, a file for a directory)."""


@dataclass(frozen=True)
class Location:
    """A resolved host path: the open directory that holds it and its name in that directory.

    `path` is where the file is on the node (absolute, no links, no `..`); `directory` is a
    descriptor the `Resolver` that made it owns and closes.
    """

    directory: int
    name: str
    path: PurePosixPath


class Resolver:
    """Resolves node paths inside one host root; a context manager that closes its descriptors."""

    def __init__(self, host_root: Path) -> None:
        self.host_root = host_root
        try:
            self._root = os.open(host_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            raise NodeInstallerError(
                f"host root {host_root} is not a directory: {error.strerror or error}"
            ) from None
        self._open: list[int] = [self._root]

    def __enter__(self) -> Resolver:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for descriptor in self._open:
            os.close(descriptor)
        self._open = []

    def host_path(self, path: PurePosixPath) -> Path:
        """Where a resolved node path is in the installer's view (for messages and tests)."""
        return self.host_root / str(path).lstrip("/")

    def resolve(self, path: PurePosixPath, *, follow: bool, create: bool = False) -> Location:
        """The directory holding `path`'s last component, and that component's name.

        Links among the directories are followed inside the host root; the last component's
        link too if `follow`. Missing directories are made (mode 755) if `create`, else the
        walk stops with `FileNotFoundError`. The last component need not exist.
        """
        pending = _components(str(path))
        stack: list[tuple[int, str]] = [(self._root, "")]
        opened: list[int] = []
        kept = self._root
        try:
            location = self._walk(path, pending, stack, opened, follow=follow, create=create)
            kept = location.directory
        finally:
            for descriptor in opened:
                if descriptor != kept:
                    os.close(descriptor)
        if kept != self._root:
            self._open.append(kept)
        return location

    def _walk(
        self,
        path: PurePosixPath,
        pending: list[str],
        stack: list[tuple[int, str]],
        opened: list[int],
        *,
        follow: bool,
        create: bool,
    ) -> Location:
        links = 0
        while pending:
            name = pending.pop(0)
            if name == "..":
                if len(stack) > 1:
                    stack.pop()
                continue
            if name == ".":
                continue  # what came before had to be a directory, and was opened as one
            directory = stack[-1][0]
            last = not pending
            try:
                status: os.stat_result | None = os.stat(
                    name, dir_fd=directory, follow_symlinks=False
                )
            except FileNotFoundError:
                status = None
            except OSError as error:
                raise self._error(path, stack, name, error) from None
            if status is not None and stat.S_ISLNK(status.st_mode) and (follow or not last):
                links += 1
                if links > MAX_LINKS:
                    raise HostPathError(
                        f"{path} in host root {self.host_root}: too many symbolic links"
                        f" (more than {MAX_LINKS})",
                        hint="a link on the node points, directly or not, at itself",
                    )
                target = os.readlink(name, dir_fd=directory)
                if target.startswith("/"):
                    del stack[1:]
                pending[:0] = _components(target)
                continue
            if last:
                return Location(directory, name, _joined(stack, name))
            if status is None:
                if not create:
                    raise FileNotFoundError(
                        errno.ENOENT, "no such directory", str(_joined(stack, name))
                    )
                with suppress(FileExistsError):  # made meanwhile; opened without following
                    os.mkdir(name, DIRECTORY_MODE, dir_fd=directory)
            try:
                descriptor = os.open(name, _DIRECTORY_FLAGS, dir_fd=directory)
            except OSError as error:
                raise self._error(path, stack, name, error) from None
            opened.append(descriptor)
            stack.append((descriptor, name))
        # Nothing left but `..`: the path names a directory, the host root at the least.
        raise HostPathError(f"{path} in host root {self.host_root} is a directory, not a file")

    def directory(self, path: PurePosixPath, *, create: bool) -> tuple[int, PurePosixPath]:
        """An open descriptor of the directory `path` (made with its parents if `create`).

        Raises `FileNotFoundError` if it is missing and not `create`.
        """
        location = self.resolve(path, follow=True, create=create)
        if create:
            with suppress(FileExistsError):
                os.mkdir(location.name, DIRECTORY_MODE, dir_fd=location.directory)
        try:
            descriptor = os.open(location.name, _DIRECTORY_FLAGS, dir_fd=location.directory)
        except FileNotFoundError:
            raise
        except OSError as error:
            raise HostPathError(
                f"cannot open directory {location.path} in host root {self.host_root}:"
                f" {error.strerror or error}"
            ) from None
        self._open.append(descriptor)
        return descriptor, location.path

    def _error(
        self, path: PurePosixPath, stack: list[tuple[int, str]], name: str, error: OSError
    ) -> HostPathError:
        return HostPathError(
            f"cannot resolve {path} in host root {self.host_root}: {_joined(stack, name)}:"
            f" {error.strerror or error}"
        )


def _components(path: str) -> list[str]:
    """The names to walk; `.` stays (it requires a directory), a trailing `/` becomes one."""
    parts = [part for part in path.split("/") if part]
    return [*parts, "."] if parts and path.endswith("/") else parts


def _joined(stack: list[tuple[int, str]], name: str) -> PurePosixPath:
    return PurePosixPath("/", *(part for _, part in stack[1:]), name)


@contextmanager
def opened_file(location: Location) -> Iterator[int | None]:
    """A read-only descriptor of the regular file at `location`, or None if there is none.

    The last component is not followed (a resolved location's link, if any, is the one to
    replace), and a FIFO or device is refused instead of being read: opening is non-blocking.
    """
    try:
        descriptor = os.open(
            location.name,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            dir_fd=location.directory,
        )
    except FileNotFoundError:
        yield None
        return
    except OSError as error:
        if error.errno == errno.ELOOP:  # a link, opened without following it
            yield None
            return
        raise
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            yield None
            return
        os.set_blocking(descriptor, True)
        yield descriptor
    finally:
        os.close(descriptor)


def kind_of(location: Location) -> str | None:
    """'file', 'link' or 'other' for what `location` names, None if nothing."""
    try:
        mode = os.stat(location.name, dir_fd=location.directory, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return "file"
    return "link" if stat.S_ISLNK(mode) else "other"


def read_file(location: Location) -> bytes | None:
    """The bytes of the regular file at `location`; None if it does not exist.

    Raises `HostPathError` if something else is there: reading a FIFO would block, and a
    device such as `/dev/zero` would never end.
    """
    kind = kind_of(location)
    if kind is None:
        return None
    if kind != "file":
        raise HostPathError(f"{location.path} is not a regular file")
    with opened_file(location) as descriptor:
        if descriptor is None:
            raise HostPathError(f"{location.path} is not a regular file")
        chunks = []
        while chunk := os.read(descriptor, _CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)


def mode_of(location: Location) -> int:
    status = os.stat(location.name, dir_fd=location.directory, follow_symlinks=False)
    return stat.S_IMODE(status.st_mode)


def write_new(directory: int, name: str, data: bytes, mode: int) -> None:
    """Create the file `name` in `directory` (it must not exist) with `data` and `mode`, synced."""
    descriptor = os.open(
        name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
        dir_fd=directory,
    )  # fmt: skip
    try:
        os.fchmod(descriptor, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def temporary_name(name: str) -> str:
    """`files.write_atomically`'s temporary name: `.<name>.<8 random characters>.tmp`."""
    return f".{name}.{secrets.token_hex(4)}.tmp"


def write_atomically(location: Location, data: bytes, *, mode: int) -> None:
    """Replace the file at `location` with `data` so that a crash leaves the old or the new one.

    As `contrast.files.write_atomically`, but relative to the resolved directory: the temporary
    file is made beside the name and renamed onto it, so a link there is replaced, never
    written through (resolve with `follow=True` to write a link's target).
    """
    temporary = temporary_name(location.name)
    try:
        write_new(location.directory, temporary, data, mode)
        os.rename(
            temporary, location.name, src_dir_fd=location.directory, dst_dir_fd=location.directory
        )
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=location.directory)
        raise
    os.fsync(location.directory)
