"""A minimal Debian root file system from pinned packages, with `mmdebstrap`.

`mmdebstrap --variant=extract` unpacks the packages and their dependencies without running any
maintainer script, so the result is exactly the packages' files. Then everything an image must not
hold goes: shells, the package manager, documentation (the copyright files stay), device nodes
(the runtime provides /dev), caches. The versions come from the lock, and the build checks that
apt resolved exactly the locked set: a mirror that dropped a version fails the build by name.
"""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
import tempfile
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from contrast.imagebuild.layer import Entry
from contrast.imagebuild.lock import BuildError
from contrast.imagebuild.spec import DEBIAN_MIRROR, DEBIAN_SUITE

ARCHIVES = "var/cache/apt/archives"
# Paths (and everything below them) no image holds: shells, package management, docs, caches.
EXCLUDED = (
    "bin/sh", "bin/dash", "bin/bash", "bin/rbash", "usr/bin/sh", "usr/bin/dash",
    "usr/bin/bash", "usr/bin/rbash", "bin/tar", "usr/bin/tar", "usr/sbin/rmt-tar",
    "usr/sbin/tarcat", "sbin/start-stop-daemon", "usr/sbin/start-stop-daemon",
    "usr/bin/dpkg", "usr/bin/dpkg-deb", "usr/bin/dpkg-divert", "usr/bin/dpkg-maintscript-helper",
    "usr/bin/dpkg-query", "usr/bin/dpkg-realpath", "usr/bin/dpkg-split",
    "usr/bin/dpkg-statoverride", "usr/bin/dpkg-trigger", "usr/bin/update-alternatives",
    "usr/sbin/dpkg-fsys-usrunmess", "usr/share/dpkg", "usr/lib/dpkg", "usr/libexec/dpkg",
    "etc/dpkg", "etc/apt", "etc/cron.daily", "etc/logrotate.d", "etc/alternatives",
    "var/lib/dpkg", "var/lib/apt", "var/cache", "var/log", "dev",
    "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian",
    "usr/share/bash-completion", "usr/share/readline", "usr/share/polkit-1", "usr/share/bug",
    "usr/share/gcc", "usr/share/gdb",
)  # fmt: skip
_ARCHIVE_NAME = re.compile(r"^(?P<name>[^_]+)_(?P<version>[^_]+)_(?P<arch>[^_]+)\.deb$")


def excluded(path: str) -> bool:
    """Whether an image leaves out `path` (relative, no leading slash)."""
    if path.startswith("usr/share/doc/"):
        # Licences travel with the binaries; the rest of the documentation does not.
        return not (path.endswith("/copyright") or path.count("/") == 3)
    return any(path == prefix or path.startswith(prefix + "/") for prefix in EXCLUDED)


def resolve(include: Sequence[str], *, epoch: int) -> dict[str, str]:
    """The package versions mmdebstrap resolves for `include` on the mirror today (for --relock)."""
    with tempfile.TemporaryDirectory(prefix="contrast-debian-") as scratch:
        versions, _ = _bootstrap(list(include), Path(scratch), epoch=epoch)
    return versions


def root_filesystem(
    include: Sequence[str], locked: Mapping[str, str], scratch: Path, *, epoch: int
) -> Path:
    """A tar of the locked packages' files (mmdebstrap's output, before filtering)."""
    pinned = [f"{name}={version}" for name, version in sorted(locked.items())]
    missing = [name for name in include if name not in locked]
    if missing:
        raise BuildError(
            f"the lock has no version for Debian package(s) {', '.join(missing)}",
            hint="rewrite images/lock.json with contrast-build-images --relock",
        )
    versions, archive = _bootstrap(pinned, scratch, epoch=epoch)
    if versions != dict(locked):
        extra = sorted(set(versions.items()) ^ set(locked.items()))
        raise BuildError(
            f"apt resolved other Debian packages than images/lock.json: {extra}",
            hint="rewrite the lock with contrast-build-images --relock and review the change",
        )
    return archive


def _bootstrap(include: list[str], scratch: Path, *, epoch: int) -> tuple[dict[str, str], Path]:
    archive = scratch / "rootfs.tar"
    mode = "root" if os.geteuid() == 0 else "unshare"
    command = [
        "mmdebstrap", "--variant=extract", f"--mode={mode}", "--format=tar", "--quiet",
        f"--include={','.join(include)}", "--skip=cleanup/apt/cache",
        DEBIAN_SUITE, str(archive), DEBIAN_MIRROR,
    ]  # fmt: skip
    environment = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
    try:
        result = subprocess.run(  # noqa: S603
            command, env=environment, capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise BuildError(
            "mmdebstrap is not installed", hint="apt-get install mmdebstrap (Debian)"
        ) from None
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.startswith("E:")]
        detail = "; ".join(lines[-3:]) or result.stderr.strip()[-400:]
        raise BuildError(
            f"mmdebstrap failed: {detail}",
            hint="a locked version may have left the mirror: contrast-build-images --relock",
        )
    # The downloaded packages stay in the tar (--skip=cleanup/apt/cache): their names are the
    # versions apt resolved; `entries` leaves them out of the images.
    versions = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            directory, _, name = member.name.removeprefix("./").rpartition("/")
            match = _ARCHIVE_NAME.match(name)
            if directory == ARCHIVES and match:
                versions[match["name"]] = urllib.parse.unquote(match["version"])
    return versions, archive


def entries(archive: Path) -> Iterator[Entry]:
    """The files of a root file system tar that an image keeps."""
    with tarfile.open(archive) as tar:
        for member in tar:
            path = member.name.removeprefix("./").rstrip("/")
            if not path or path == "." or excluded(path):
                continue
            mode = member.mode & 0o7777
            if member.isdir():
                yield Entry.directory(path, mode)
            elif member.issym():
                yield Entry.symlink(path, member.linkname)
            elif member.islnk():
                target = member.linkname.removeprefix("./")
                if not excluded(target):
                    data = tar.extractfile(target)
                    assert data is not None
                    yield Entry.file(path, data.read(), tar.getmember(member.linkname).mode)
            elif member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                yield Entry.file(path, data.read(), mode)
