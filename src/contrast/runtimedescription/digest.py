"""The runtime hash that names a runtime's handler, and the digests of the files a runtime pins.

The runtime hash follows the original's `hashDirs` (research/contrast.md §2.3): one line per
input, sorted bytewise, SHA-256 over the lines, first 8 hex characters. The inputs are the
artefacts' digests, sizes, modes and install paths, the Kata config path, the kernel command line,
the platform name and the digest of the installer's own source, so any change to the runtime or
to the installer gives a new handler name and two versions can be installed side by side.

The installer's source is the Python files of `nodeinstaller` and of this package (whose code
decides what is installed and under which name). They are read as files, not imported: the digest
is derived on every start that names a runtime class, from the source as it is, so there is no
recorded digest to forget to update after a change to the installer.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from contrast.runtimedescription.errors import ArtefactUnreadable
from contrast.runtimedescription.model import (
    INSTALL_PREFIX,
    RUNTIME_CLASS_PREFIX,
    Artefact,
    ArtefactRole,
    RuntimeDescription,
)

HASH_LENGTH = 8
# The packages whose source is the installer's share of every runtime hash.
INSTALLER_PACKAGES = ("nodeinstaller", "runtimedescription")
_CHUNK = 1 << 20
# `contrast/`, the installed package: its source files are read from here (importlib.resources
# would cost more at start than the reading does; the package is never run from a zip).
_CONTRAST = Path(__file__).resolve().parent.parent


def _source_files(folder: Path, prefix: str) -> list[tuple[str, bytes]]:
    files: list[tuple[str, bytes]] = []
    for entry in folder.iterdir():
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            if entry.name != "__pycache__":
                files.extend(_source_files(entry, f"{name}/"))
        elif entry.name.endswith(".py"):
            files.append((name, entry.read_bytes()))
    return files


def installer_files() -> list[tuple[str, bytes]]:
    """(path below `contrast/`, bytes) of every Python file of the installer's packages."""
    return [
        file
        for package in INSTALLER_PACKAGES
        for file in _source_files(_CONTRAST / package, f"{package}/")
    ]


@functools.cache
def installer_source_digest() -> str:
    """SHA-256 over the installer's Python files: the installer's share of the runtime hash.

    The shipped descriptions (JSON) are left out here: each enters only its own platform's hash.
    """
    lines = sorted(
        f"{hashlib.sha256(data).hexdigest()}  {name}" for name, data in installer_files()
    )
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


def hash_inputs(description: RuntimeDescription, installer_digest: str) -> list[str]:
    """The lines the runtime hash covers, sorted bytewise as `LC_ALL=C sort` would."""
    lines = [f"artefact {a.sha256} {a.size} {a.mode:o} {a.path}" for a in description.artefacts]
    if description.kata_config is not None:
        lines.append(f"kata-config {description.kata_config}")
    kernel_params = hashlib.sha256(description.kernel_params.encode()).hexdigest()
    lines += [
        f"kernel-params {kernel_params}",
        f"installer {installer_digest}",
        f"platform {description.platform}",
    ]
    return sorted(lines, key=lambda line: line.encode())


def runtime_digest(description: RuntimeDescription, installer_digest: str | None = None) -> str:
    """The full SHA-256 (hex) over `hash_inputs`; the runtime hash is its first 8 characters."""
    digest = installer_source_digest() if installer_digest is None else installer_digest
    listing = "".join(f"{line}\n" for line in hash_inputs(description, digest))
    return hashlib.sha256(listing.encode()).hexdigest()


def runtime_hash_of(description: RuntimeDescription, installer_digest: str | None = None) -> str:
    """8 hex characters naming this runtime in its handler (`contrast-cc-<platform>-<hash>`)."""
    return runtime_digest(description, installer_digest)[:HASH_LENGTH]


def handler_of(description: RuntimeDescription) -> str:
    """The runtime handler (and runtime class name) of this exact runtime."""
    return f"{RUNTIME_CLASS_PREFIX}-{description.platform}-{runtime_hash_of(description)}"


def file_digest(path: Path) -> tuple[str, int]:
    """SHA-256 (hex) and size of a file, read in chunks so a guest image never sits in memory."""
    hasher = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as file:
            while chunk := file.read(_CHUNK):
                hasher.update(chunk)
                size += len(chunk)
    except OSError as error:
        raise ArtefactUnreadable(f"cannot read {path}: {error.strerror or error}") from error
    return hasher.hexdigest(), size


def stamp_artefact(
    *, name: str, role: ArtefactRole, relative: str, file: Path, executable: bool
) -> Artefact:
    """The description entry of a built file: what a release build writes for each artefact."""
    sha256, size = file_digest(file)
    return Artefact(
        name=name,
        role=role,
        path=f"{INSTALL_PREFIX}{relative}",
        sha256=sha256,
        size=size,
        executable=executable,
    )
