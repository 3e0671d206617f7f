"""The host-root resolver against the kernel's own `openat2(RESOLVE_IN_ROOT)` on trees of links.

Random trees of directories, files and links (absolute, relative, climbing with `..`, dangling,
looping) are resolved by both; every path must end at the same inode or fail the same way, and
the resolver's directories must all be inside the root.
"""

from __future__ import annotations

import ctypes
import errno
import os
import random
import stat
import struct
from pathlib import Path, PurePosixPath

import pytest

from contrast.nodeinstaller.hostroot import (
    MAX_LINKS,
    HostPathError,
    Location,
    Resolver,
    read_file,
    write_atomically,
)

SYS_OPENAT2 = 437  # the same number on every architecture (added after the tables were unified)
RESOLVE_IN_ROOT = 0x10
NAMES = ("a", "b", "c")
TREES = 100
QUERIES = 40


def openat2(root: int, path: str, *, follow: bool) -> tuple[str, tuple[int, int] | None]:
    """The kernel's answer: ('ok', (dev, inode)) or (errno name, None)."""
    libc = ctypes.CDLL(None, use_errno=True)
    flags = os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    how = ctypes.create_string_buffer(struct.pack("QQQ", flags, 0, RESOLVE_IN_ROOT))
    descriptor = libc.syscall(SYS_OPENAT2, root, path.encode(), how, 24)
    if descriptor < 0:
        return errno.errorcode[ctypes.get_errno()], None
    try:
        status = os.fstat(descriptor)
    finally:
        os.close(descriptor)
    kind = "dir" if stat.S_ISDIR(status.st_mode) else "ok"
    return kind, (status.st_dev, status.st_ino)


def ours(resolver: Resolver, path: str, *, follow: bool) -> tuple[str, tuple[int, int] | None]:
    """The resolver's answer, in the kernel's terms."""
    try:
        location = resolver.resolve(PurePosixPath(path), follow=follow)
    except FileNotFoundError:
        return "ENOENT", None
    except HostPathError as error:
        text = str(error)
        if "too many symbolic links" in text:
            return "ELOOP", None
        if "is a directory, not a file" in text:
            return "dir", None
        if "Not a directory" in text:
            return "ENOTDIR", None
        raise
    assert_inside(resolver, location)
    try:
        status = os.stat(location.name, dir_fd=location.directory, follow_symlinks=False)
    except FileNotFoundError:
        return "ENOENT", None
    kind = "dir" if stat.S_ISDIR(status.st_mode) else "ok"
    return kind, (status.st_dev, status.st_ino)


def assert_inside(resolver: Resolver, location: Location) -> None:
    real = Path(os.readlink(f"/proc/self/fd/{location.directory}"))
    root = resolver.host_root.resolve()
    assert real == root or root in real.parents, (real, root)
    # The path it reports is where it is: no links left in it.
    assert real == root / str(location.path.parent).lstrip("/")


def random_path(rng: random.Random, *, absolute: bool) -> str:
    parts = [rng.choice((*NAMES, *NAMES, "..", ".")) for _ in range(rng.randint(1, 4))]
    return ("/" if absolute else "") + "/".join(parts)


def random_tree(rng: random.Random, root: Path) -> None:
    """Directories, files and links under `root`, made without ever following a link (the
    links point anywhere, the installer's own `/` included)."""
    for _ in range(rng.randint(3, 14)):
        names = [rng.choice(NAMES) for _ in range(rng.randint(1, 4))]
        path = root
        for name in names[:-1]:
            path = path / name
            if not os.path.lexists(path):
                path.mkdir()
            elif not stat.S_ISDIR(path.lstat().st_mode):
                break
        else:
            path = path / names[-1]
            if not os.path.lexists(path):
                _make_entry(rng, path)


def _make_entry(rng: random.Random, path: Path) -> None:
    choice = rng.random()
    if choice < 0.3:
        path.mkdir()
    elif choice < 0.5:
        path.write_text(str(path))  # its parents are directories, none a link
    else:
        path.symlink_to(random_path(rng, absolute=rng.random() < 0.5))


def test_the_resolver_agrees_with_openat2_resolve_in_root(tmp_path: Path) -> None:
    probe = openat2(os.open(tmp_path, os.O_RDONLY), ".", follow=True)[0]
    assert probe == "dir", (
        f"this kernel has no openat2 with RESOLVE_IN_ROOT ({probe}); the test needs Linux >= 5.6"
    )
    rng = random.Random(24)
    kinds: dict[str, int] = {}
    for index in range(TREES):
        root = tmp_path / str(index)
        root.mkdir()
        random_tree(rng, root)
        descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with Resolver(root) as resolver:
                for _ in range(QUERIES):
                    # As a PurePosixPath, the resolver's input, has it (`a/./b` is `a/b`).
                    path = str(PurePosixPath(random_path(rng, absolute=rng.random() < 0.3)))
                    follow = rng.random() < 0.7
                    expected = openat2(descriptor, path, follow=follow)
                    found = ours(resolver, path, follow=follow)
                    if expected[0] == "dir" and found == ("dir", None):
                        continue  # ends in `..`: a directory, which the resolver does not open
                    assert found == expected, (index, path, follow, os.listdir(root))
                    kinds[expected[0]] = kinds.get(expected[0], 0) + 1
        finally:
            os.close(descriptor)
    # The trees exercise every outcome, not just the easy one.
    assert {"ok", "dir", "ENOENT", "ELOOP", "ENOTDIR"} <= set(kinds), kinds


@pytest.mark.parametrize("length", [MAX_LINKS, MAX_LINKS + 1])
def test_the_link_bound_is_the_kernels(tmp_path: Path, length: int) -> None:
    for index in range(length):
        (tmp_path / f"l{index}").symlink_to(f"/l{index + 1}")
    (tmp_path / f"l{length}").write_text("end")
    descriptor = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        expected = openat2(descriptor, "l0", follow=True)
    finally:
        os.close(descriptor)
    with Resolver(tmp_path) as resolver:
        assert ours(resolver, "l0", follow=True) == expected
    assert expected[0] == ("ok" if length == MAX_LINKS else "ELOOP")


def test_writing_through_a_link_writes_its_target_inside_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside.toml"
    outside.write_text("outside")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/config.toml").symlink_to("/" + "../" * 5 + "real.toml")
    with Resolver(root) as resolver:
        location = resolver.resolve(PurePosixPath("/etc/config.toml"), follow=True)
        assert location.path == PurePosixPath("/real.toml")
        assert read_file(location) is None
        write_atomically(location, b"inside", mode=0o640)
        assert read_file(location) == b"inside"
    assert outside.read_text() == "outside"
    assert (root / "real.toml").read_bytes() == b"inside"
    assert stat.S_IMODE((root / "real.toml").stat().st_mode) == 0o640
    assert os.readlink(root / "etc/config.toml") == "/" + "../" * 5 + "real.toml"
    assert sorted(p.name for p in root.iterdir()) == ["etc", "real.toml"]


def test_missing_directories_are_made_inside_the_root_only_when_asked(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "opt").symlink_to("/var/../../var/opt")
    with Resolver(root) as resolver:
        with pytest.raises(FileNotFoundError):
            resolver.resolve(PurePosixPath("/opt/edgeless/x"), follow=False)
        assert sorted(p.name for p in root.iterdir()) == ["opt"]
        location = resolver.resolve(PurePosixPath("/opt/edgeless/x"), follow=False, create=True)
        assert location.path == PurePosixPath("/var/opt/edgeless/x")
    assert (root / "var/opt/edgeless").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_a_device_or_fifo_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")  # /dev/zero of the root: missing here
    with Resolver(tmp_path) as resolver:
        with pytest.raises(HostPathError, match="/fifo is not a regular file"):
            read_file(resolver.resolve(PurePosixPath("fifo"), follow=True))
        with pytest.raises(FileNotFoundError):
            read_file(resolver.resolve(PurePosixPath("zero"), follow=True))


def test_the_resolver_closes_its_descriptors(tmp_path: Path) -> None:
    (tmp_path / "a/b/c").mkdir(parents=True)
    before = len(os.listdir("/proc/self/fd"))
    with Resolver(tmp_path) as resolver:
        for _ in range(50):
            resolver.resolve(PurePosixPath("a/b/c/file"), follow=True)
        with pytest.raises(FileNotFoundError):
            resolver.resolve(PurePosixPath("a/x/y/file"), follow=True)
    assert len(os.listdir("/proc/self/fd")) == before
