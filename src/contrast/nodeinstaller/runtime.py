"""What a platform's runtime consists of, and the hash that names it.

Each platform ships a runtime description, `runtimes/<platform>.json` next to this module: the
artefacts (containerd shim, VMM, guest kernel/initrd or IGVM, firmware, rootfs image, …), each with
its install path under `/opt/edgeless/@@runtimeName@@/`, SHA-256, size and executable flag, plus
where the rendered Kata configuration goes and the guest kernel command line it carries. The
node installer installs exactly these bytes; the reference values are computed from the same
files. `@@runtimeName@@` is the runtime handler (research/contrast.md §2.3), which in turn is
derived from this description, so the paths hold the placeholder, never the name.

`build` says where the digests come from. `contrast runtime build` (`contrast.kata.build`) stamps
them from the files of a Kata static release and writes the description as `runtime.json` into
the payload beside them (`load_payload`); the descriptions committed to the repository are
`stand-in`: stamped from the deterministic placeholder files of `standins.py`, the fallback when no
runtime was built. Such a runtime installs and patches containerd correctly but cannot start a VM.

The runtime hash follows the original's `hashDirs` (§2.3): one line per input, sorted bytewise,
SHA-256 over the lines, first 8 hex characters. The inputs are the artefacts' digests, sizes, modes
and install paths, the Kata config path, the kernel command line, the platform name and the digest
of the installer's own source (this package's Python files), so any change to the runtime or to the
installer gives a new handler name and two versions can be installed side by side.

This module imports nothing from Contrast but `errors`: `contrast.platforms` builds the runtime
class names on top of it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from enum import StrEnum
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contrast.nodeinstaller.errors import ArtefactError, RuntimeDescriptionError

INSTALL_ROOT = "/opt/edgeless"
RUNTIME_NAME_PLACEHOLDER = "@@runtimeName@@"
INSTALL_PREFIX = f"{INSTALL_ROOT}/{RUNTIME_NAME_PLACEHOLDER}/"
DESCRIPTION_FORMAT = 1
# A built runtime's payload: this file and the artefacts at their paths below the install directory.
PAYLOAD_DESCRIPTION = "runtime.json"
HASH_LENGTH = 8
_CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


class ArtefactRole(StrEnum):
    """What an artefact is for; the Kata config and the reference values look artefacts up by it."""

    SHIM = "shim"  # containerd-shim-contrast-cc-v2, containerd's runtime_path
    VMM = "vmm"  # qemu-system-x86_64 or cloud-hypervisor (for a Kata release: QEMU's wrapper)
    VMM_BINARY = "vmm-binary"  # the QEMU program its wrapper runs (built runtimes)
    VMM_DATA = "vmm-data"  # option ROMs and other files the VMM loads
    KERNEL = "kernel"
    INITRD = "initrd"
    IGVM = "igvm"  # kernel, initrd and firmware in one file (Cloud Hypervisor on AKS)
    FIRMWARE = "firmware"  # OVMF for SNP, TDVF for TDX
    ROOTFS = "rootfs"  # the dm-verity protected guest image
    TOOL = "tool"  # kata-runtime and other helpers on the host
    KATA_CONFIG = "kata-config"  # the Kata configuration with @@runtimeName@@ for the handler


# Roles the Kata config points at: at most one artefact each.
SINGLE_ROLES = frozenset(
    {
        ArtefactRole.SHIM,
        ArtefactRole.VMM,
        ArtefactRole.KERNEL,
        ArtefactRole.INITRD,
        ArtefactRole.IGVM,
        ArtefactRole.FIRMWARE,
        ArtefactRole.ROOTFS,
        ArtefactRole.VMM_BINARY,
        ArtefactRole.KATA_CONFIG,
    }
)


class Build(StrEnum):
    RELEASE = "release"
    STAND_IN = "stand-in"


def _check_install_path(path: str) -> str:
    if not path.startswith(INSTALL_PREFIX):
        raise ValueError(f"{path!r} is not under {INSTALL_PREFIX}")
    relative = path[len(INSTALL_PREFIX) :]
    parts = relative.split("/")
    if not relative or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{path!r} is not a normalised file path under {INSTALL_PREFIX}")
    if any(RUNTIME_NAME_PLACEHOLDER in part for part in parts):
        raise ValueError(f"{path!r} holds the runtime name placeholder twice")
    return path


def install_path(template: str, runtime_name: str) -> str:
    """The absolute path on the host of a description path, for handler `runtime_name`."""
    return template.replace(RUNTIME_NAME_PLACEHOLDER, runtime_name, 1)


def relative_install_path(template: str) -> PurePosixPath:
    """A description path relative to the runtime's install directory (`bin/…`, `share/…`)."""
    return PurePosixPath(template[len(INSTALL_PREFIX) :])


class Artefact(BaseModel):
    """One file of the runtime, as the release build produced it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    role: ArtefactRole
    path: str
    sha256: str
    size: int = Field(ge=0)
    executable: bool

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a lower-case artefact name")
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _check_install_path(value)

    @field_validator("sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if not _SHA256.fullmatch(value):
            raise ValueError(f"{value!r} is not 64 lower-case hex characters")
        return value

    @property
    def relative_path(self) -> PurePosixPath:
        return relative_install_path(self.path)

    @property
    def mode(self) -> int:
        return 0o755 if self.executable else 0o644


class RuntimeDescription(BaseModel):
    """The runtime of one platform: its artefacts and where its Kata config goes."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    format: Literal[1]
    platform: str
    build: Build
    kernel_params: str = Field(alias="kernel-params")
    # None only for the emulated platforms, which run no VM: they have no artefacts, the
    # installer writes the emulated runtime's launcher instead (`install._install_emulated`).
    kata_config: str | None = Field(alias="kata-config")
    artefacts: tuple[Artefact, ...]
    # Where a built runtime's files came from ("kata-static-3.9.0-amd64.tar.zst sha256:…");
    # provenance for people, not part of the runtime hash.
    source: str | None = None

    @field_validator("kata_config")
    @classmethod
    def _kata_config(cls, value: str | None) -> str | None:
        return None if value is None else _check_install_path(value)

    @model_validator(mode="after")
    def _consistent(self) -> RuntimeDescription:
        names = [artefact.name for artefact in self.artefacts]
        paths = [artefact.path for artefact in self.artefacts]
        if self.kata_config is not None:
            paths.append(self.kata_config)
        for label, values in (("artefact name", names), ("install path", paths)):
            duplicates = sorted({value for value in values if values.count(value) > 1})
            if duplicates:
                raise ValueError(f"{label} {duplicates[0]!r} appears more than once")
        # A path may not be a directory of another (bin/x and bin/x/y cannot both be files).
        directories = {str(parent) for path in paths for parent in PurePosixPath(path).parents}
        clashes = sorted(set(paths) & directories)
        if clashes:
            raise ValueError(f"install path {clashes[0]!r} is also a directory of another")
        for role in SINGLE_ROLES:
            if sum(artefact.role == role for artefact in self.artefacts) > 1:
                raise ValueError(f"more than one artefact has role {role.value!r}")
        if self.artefacts:
            missing = [
                role.value
                for role in (ArtefactRole.SHIM, ArtefactRole.VMM)
                if self.by_role(role) is None
            ]
            if missing:
                raise ValueError(f"no artefact with role {missing[0]!r}")
            if self.kata_config is None:
                raise ValueError("a runtime with artefacts needs a kata-config path")
        return self

    def by_role(self, role: ArtefactRole) -> Artefact | None:
        """The artefact of a single-artefact role, or None if this runtime has none."""
        return next((artefact for artefact in self.artefacts if artefact.role == role), None)

    def to_json(self) -> str:
        """The description as committed: hyphenated keys, two-space indent, final newline."""
        document = self.model_dump(mode="json", by_alias=True)
        if document["source"] is None:
            del document["source"]  # stand-ins have none; their files stay as committed
        return json.dumps(document, indent=2) + "\n"


def parse_runtime(data: bytes | str, *, source: str) -> RuntimeDescription:
    """A runtime description from its JSON; unknown keys and inconsistent entries are errors."""
    try:
        return RuntimeDescription.model_validate_json(data)
    except ValidationError as error:
        raise RuntimeDescriptionError(
            f"runtime description {source} is invalid: {error}",
            hint="this is a packaging error; rebuild the runtime description",
        ) from error


def load_payload(directory: Path) -> RuntimeDescription:
    """The description of a built runtime's payload: `runtime.json` beside its artefacts."""
    path = directory / PAYLOAD_DESCRIPTION
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RuntimeDescriptionError(
            f"payload {directory} has no readable {PAYLOAD_DESCRIPTION}: {error.strerror or error}",
            hint="pass the directory `contrast runtime build` wrote (runtimes/<handler>)",
        ) from None
    return parse_runtime(data, source=str(path))


def _runtimes_folder() -> Traversable:
    return resources.files(__package__ or "contrast.nodeinstaller") / "runtimes"


@functools.cache
def load_runtime(platform_name: str) -> RuntimeDescription:
    """The shipped runtime description of a platform (by its lower-case name)."""
    entry = _runtimes_folder() / f"{platform_name}.json"
    if not entry.is_file():
        raise RuntimeDescriptionError(
            f"no runtime description for platform {platform_name!r}",
            hint="this is a packaging error: runtimes/<platform>.json must ship with Contrast",
        )
    description = parse_runtime(entry.read_bytes(), source=f"runtimes/{platform_name}.json")
    if description.platform != platform_name:
        raise RuntimeDescriptionError(
            f"runtimes/{platform_name}.json describes platform {description.platform!r}"
        )
    return description


def _source_files(folder: Traversable, prefix: str = "") -> list[tuple[str, bytes]]:
    files: list[tuple[str, bytes]] = []
    for entry in folder.iterdir():
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            if entry.name != "__pycache__":
                files.extend(_source_files(entry, f"{name}/"))
        elif entry.name.endswith(".py"):
            files.append((name, entry.read_bytes()))
    return files


@functools.cache
def installer_source_digest() -> str:
    """SHA-256 over this package's Python files: the installer's share of the runtime hash.

    The runtime descriptions are left out here: each enters only its own platform's hash.
    """
    folder = resources.files(__package__ or "contrast.nodeinstaller")
    lines = sorted(
        f"{hashlib.sha256(data).hexdigest()}  {name}" for name, data in _source_files(folder)
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
        raise ArtefactError(f"cannot read {path}: {error.strerror or error}") from error
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
