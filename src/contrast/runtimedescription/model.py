"""What a platform's runtime consists of: the description's types, read from and written to JSON.

Each platform ships a runtime description, `runtimes/<platform>.json` next to this module: the
artefacts (containerd shim, VMM, guest kernel/initrd or IGVM, firmware, rootfs image, …), each with
its install path under `/opt/edgeless/@@runtimeName@@/`, SHA-256, size and executable flag, plus
where the rendered Kata configuration goes and the guest kernel command line it carries. The
node installer installs exactly these bytes; the reference values are computed from the same
files. `@@runtimeName@@` is the runtime handler (research/contrast.md §2.3), which in turn is
derived from this description (`digest`), so the paths hold the placeholder, never the name.

`build` says where the digests come from. `contrast runtime build` (`contrast.kata.build`) stamps
them from the files of a Kata static release and writes the description as `runtime.json` into
the payload beside them (`shipped.load_payload`); the descriptions committed to the repository are
`stand-in`: stamped from the deterministic placeholder files of `nodeinstaller.standins`, the
fallback when no runtime was built. Such a runtime installs and patches containerd correctly but
cannot start a VM.

Frozen dataclasses, checked when made (`__post_init__`), not pydantic models: every `generate`
reads a description to name the runtime class, and importing pydantic and building its models
was a sixth of its start. The JSON is read strictly: unknown keys, missing keys and values of
the wrong type are refused, never coerced, and `to_json` writes the committed files byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any

from contrast.runtimedescription.errors import RuntimeDescriptionError

INSTALL_ROOT = "/opt/edgeless"
RUNTIME_NAME_PLACEHOLDER = "@@runtimeName@@"
INSTALL_PREFIX = f"{INSTALL_ROOT}/{RUNTIME_NAME_PLACEHOLDER}/"
RUNTIME_CLASS_PREFIX = "contrast-cc"  # a handler is `contrast-cc-<platform>-<hash>`
DESCRIPTION_FORMAT = 1
# A built runtime's payload: this file and the artefacts at their paths below the install directory.
PAYLOAD_DESCRIPTION = "runtime.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


class InvalidDescription(RuntimeDescriptionError):
    """One reason a description is malformed; `parse_runtime` names the file it came from."""


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
        raise InvalidDescription(f"{path!r} is not under {INSTALL_PREFIX}")
    relative = path[len(INSTALL_PREFIX) :]
    parts = relative.split("/")
    if not relative or any(part in ("", ".", "..") for part in parts):
        raise InvalidDescription(f"{path!r} is not a normalised file path under {INSTALL_PREFIX}")
    if any(RUNTIME_NAME_PLACEHOLDER in part for part in parts):
        raise InvalidDescription(f"{path!r} holds the runtime name placeholder twice")
    return path


def install_path(template: str, runtime_name: str) -> str:
    """The absolute path on the host of a description path, for handler `runtime_name`."""
    return template.replace(RUNTIME_NAME_PLACEHOLDER, runtime_name, 1)


def relative_install_path(template: str) -> PurePosixPath:
    """A description path relative to the runtime's install directory (`bin/…`, `share/…`)."""
    return PurePosixPath(template[len(INSTALL_PREFIX) :])


@dataclass(frozen=True)
class Artefact:
    """One file of the runtime, as the release build produced it."""

    name: str
    role: ArtefactRole
    path: str
    sha256: str
    size: int
    executable: bool

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise InvalidDescription(f"{self.name!r} is not a lower-case artefact name")
        _check_install_path(self.path)
        if not _SHA256.fullmatch(self.sha256):
            raise InvalidDescription(f"sha256 {self.sha256!r} is not 64 lower-case hex characters")
        if self.size < 0:
            raise InvalidDescription(f"size must be greater than or equal to 0, got {self.size}")

    @property
    def relative_path(self) -> PurePosixPath:
        return relative_install_path(self.path)

    @property
    def mode(self) -> int:
        return 0o755 if self.executable else 0o644

    @classmethod
    def from_dict(cls, value: object, where: str) -> Artefact:
        keys = _keys(value, where, _ARTEFACT_KEYS, optional=frozenset())
        return cls(
            name=_typed(keys, "name", str, where),
            role=_role(_typed(keys, "role", str, where), where),
            path=_typed(keys, "path", str, where),
            sha256=_typed(keys, "sha256", str, where),
            size=_typed(keys, "size", int, where),
            executable=_typed(keys, "executable", bool, where),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role.value,
            "path": self.path,
            "sha256": self.sha256,
            "size": self.size,
            "executable": self.executable,
        }


@dataclass(frozen=True)
class RuntimeDescription:
    """The runtime of one platform: its artefacts and where its Kata config goes."""

    format: int
    platform: str
    build: Build
    kernel_params: str
    # None only for the emulated platforms, which run no VM: they have no artefacts, the
    # installer writes the emulated runtime's launcher instead (`nodeinstaller.install`).
    kata_config: str | None
    artefacts: tuple[Artefact, ...]
    # Where a built runtime's files came from ("kata-static-3.9.0-amd64.tar.zst sha256:…");
    # provenance for people, not part of the runtime hash.
    source: str | None = None

    def __post_init__(self) -> None:
        if self.format != DESCRIPTION_FORMAT:
            raise InvalidDescription(f"format {self.format!r} is not {DESCRIPTION_FORMAT}")
        if self.kata_config is not None:
            _check_install_path(self.kata_config)
        names = [artefact.name for artefact in self.artefacts]
        paths = [artefact.path for artefact in self.artefacts]
        if self.kata_config is not None:
            paths.append(self.kata_config)
        for label, values in (("artefact name", names), ("install path", paths)):
            duplicates = sorted({value for value in values if values.count(value) > 1})
            if duplicates:
                raise InvalidDescription(f"{label} {duplicates[0]!r} appears more than once")
        # A path may not be a directory of another (bin/x and bin/x/y cannot both be files).
        directories = {str(parent) for path in paths for parent in PurePosixPath(path).parents}
        clashes = sorted(set(paths) & directories)
        if clashes:
            raise InvalidDescription(f"install path {clashes[0]!r} is also a directory of another")
        for role in sorted(SINGLE_ROLES):
            if sum(artefact.role == role for artefact in self.artefacts) > 1:
                raise InvalidDescription(f"more than one artefact has role {role.value!r}")
        if self.artefacts:
            missing = [
                role.value
                for role in (ArtefactRole.SHIM, ArtefactRole.VMM)
                if self.by_role(role) is None
            ]
            if missing:
                raise InvalidDescription(f"no artefact with role {missing[0]!r}")
            if self.kata_config is None:
                raise InvalidDescription("a runtime with artefacts needs a kata-config path")

    def by_role(self, role: ArtefactRole) -> Artefact | None:
        """The artefact of a single-artefact role, or None if this runtime has none."""
        return next((artefact for artefact in self.artefacts if artefact.role == role), None)

    @classmethod
    def from_dict(cls, value: object) -> RuntimeDescription:
        keys = _keys(value, "description", _DESCRIPTION_KEYS, optional=frozenset({"source"}))
        artefacts = keys["artefacts"]
        if not isinstance(artefacts, list):
            raise InvalidDescription("artefacts: is not a list")
        build = _typed(keys, "build", str, "description")
        if build not in set(Build):
            raise InvalidDescription(f"build: {build!r} is none of {', '.join(Build)}")
        return cls(
            format=_typed(keys, "format", int, "description"),
            platform=_typed(keys, "platform", str, "description"),
            build=Build(build),
            kernel_params=_typed(keys, "kernel-params", str, "description"),
            kata_config=_typed(keys, "kata-config", str | None, "description"),
            artefacts=tuple(
                Artefact.from_dict(item, f"artefacts.{index}")
                for index, item in enumerate(artefacts)
            ),
            source=_typed(keys, "source", str | None, "description"),
        )

    def to_json(self) -> str:
        """The description as committed: hyphenated keys, two-space indent, final newline."""
        document: dict[str, Any] = {
            "format": self.format,
            "platform": self.platform,
            "build": self.build.value,
            "kernel-params": self.kernel_params,
            "kata-config": self.kata_config,
            "artefacts": [artefact.to_dict() for artefact in self.artefacts],
        }
        if self.source is not None:  # stand-ins have none; their files stay as committed
            document["source"] = self.source
        return json.dumps(document, indent=2) + "\n"


_ARTEFACT_KEYS = frozenset(field.name for field in fields(Artefact))
_DESCRIPTION_KEYS = frozenset(field.name.replace("_", "-") for field in fields(RuntimeDescription))


def _keys(
    value: object, where: str, known: frozenset[str], *, optional: frozenset[str]
) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise InvalidDescription(f"{where}: is not a JSON object")
    unknown = sorted(set(value) - known)
    if unknown:
        raise InvalidDescription(f"{where}: unknown key {unknown[0]!r} (extra keys are refused)")
    missing = sorted(known - optional - set(value))
    if missing:
        raise InvalidDescription(f"{where}: key {missing[0]!r} is missing")
    return value


def _typed(keys: Mapping[str, object], key: str, kind: Any, where: str) -> Any:
    """`keys[key]` if it is a `kind` (bool is no int here, as JSON's true is no number)."""
    value = keys.get(key)
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise InvalidDescription(f"{where}.{key}: {value!r} is not of type {_type_name(kind)}")
    return value


def _type_name(kind: Any) -> str:
    return getattr(kind, "__name__", None) or str(kind)


def _role(value: str, where: str) -> ArtefactRole:
    if value not in set(ArtefactRole):
        raise InvalidDescription(f"{where}.role: {value!r} is none of {', '.join(ArtefactRole)}")
    return ArtefactRole(value)


def parse_runtime(data: bytes | str, *, source: str) -> RuntimeDescription:
    """A runtime description from its JSON; unknown keys and inconsistent entries are errors."""
    try:
        return RuntimeDescription.from_dict(json.loads(data))
    except (ValueError, RuntimeDescriptionError) as error:  # JSON's, or InvalidDescription
        raise RuntimeDescriptionError(
            f"runtime description {source} is invalid: {error}",
            hint="this is a packaging error; rebuild the runtime description",
        ) from None
