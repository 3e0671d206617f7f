"""Checking artefacts against their description before anything on the host changes.

Every artefact is read twice: once in the source directory before the installer touches the
host, and again while it is copied into the staging directory, so a file that changes in between
is caught too. Sizes are checked first because they are free and name the common corruption
(a truncated download) precisely.
"""

from __future__ import annotations

import hashlib
import os
import stat
from contextlib import ExitStack
from pathlib import Path

from contrast.nodeinstaller.errors import ArtefactError
from contrast.nodeinstaller.hostroot import Location, kind_of, opened_file
from contrast.runtimedescription.digest import file_digest
from contrast.runtimedescription.errors import ArtefactUnreadable
from contrast.runtimedescription.model import Artefact, RuntimeDescription

_CHUNK = 1 << 20


def source_path(directory: Path, artefact: Artefact) -> Path:
    """Where the installer reads an artefact: its install path, relative to `directory`."""
    return directory / artefact.relative_path


def problem(artefact: Artefact, path: Path) -> str | None:
    """Why the file at `path` is not `artefact`, or None if it is."""
    try:
        status = path.lstat()
    except FileNotFoundError:
        return f"{artefact.name}: {path} is missing"
    except OSError as error:
        return f"{artefact.name}: cannot read {path}: {error.strerror or error}"
    if not stat.S_ISREG(status.st_mode):
        return f"{artefact.name}: {path} is not a regular file"
    if status.st_size != artefact.size:
        return f"{artefact.name}: {path} has {status.st_size} bytes, expected {artefact.size}"
    try:
        digest, _ = file_digest(path)
    except ArtefactUnreadable as error:
        return f"{artefact.name}: {error}"
    if digest != artefact.sha256:
        return f"{artefact.name}: {path} has sha256 {digest}, expected {artefact.sha256}"
    return None


def verify_artefacts(description: RuntimeDescription, directory: Path) -> None:
    """Raise `ArtefactError` naming every artefact in `directory` that differs from its entry."""
    problems = [
        found
        for artefact in description.artefacts
        if (found := problem(artefact, source_path(directory, artefact))) is not None
    ]
    if problems:
        raise ArtefactError(
            f"{len(problems)} artefact(s) do not match the runtime description: "
            + "; ".join(problems),
            hint="the node-installer image is damaged or from another release; nothing was"
            " installed",
        )


def is_installed(artefact: Artefact, location: Location) -> bool:
    """Whether the host file at `location` is exactly this artefact with its mode (a re-run
    skips it); a link there is not, and is replaced by the file."""
    if kind_of(location) != "file":
        return False
    with opened_file(location) as descriptor:
        if descriptor is None:
            return False
        status = os.fstat(descriptor)
        if stat.S_IMODE(status.st_mode) != artefact.mode or status.st_size != artefact.size:
            return False
        hasher = hashlib.sha256()
        while chunk := os.read(descriptor, _CHUNK):
            hasher.update(chunk)
        return hasher.hexdigest() == artefact.sha256


def copy_artefact(artefact: Artefact, source: Path, directory: int, name: str) -> None:
    """Copy `source` to the new file `name` in `directory` with the artefact's mode, checking its
    digest."""
    hasher = hashlib.sha256()
    try:
        with ExitStack() as files:
            reader = files.enter_context(source.open("rb"))
            descriptor = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                artefact.mode, dir_fd=directory,
            )  # fmt: skip
            writer = files.enter_context(os.fdopen(descriptor, "wb"))
            os.fchmod(descriptor, artefact.mode)
            while chunk := reader.read(_CHUNK):
                hasher.update(chunk)
                writer.write(chunk)
            writer.flush()
            os.fsync(writer.fileno())
    except OSError as error:
        raise ArtefactError(f"{artefact.name}: cannot copy {source}: {error}") from error
    if hasher.hexdigest() != artefact.sha256:
        raise ArtefactError(
            f"{artefact.name}: {source} changed while it was installed",
            hint="run the installer again",
        )
