"""The target config: where this node keeps containerd's config and which unit runs containerd.

Keys as in the original's ConfigMap `contrast-node-installer-target-config` (research/contrast.md
§8), plus `artefacts-dir`. It is read either from a directory, as Kubernetes mounts a ConfigMap
(one file per key; kubelet's `..data` entries are skipped; an absent optional ConfigMap is an
empty directory, so all defaults), or from a JSON file holding one object with the same keys.
Values are strings; unknown keys are errors, so a misspelt key is never silently ignored.

| key | default | meaning |
| --- | --- | --- |
| `containerd-config-path` | `etc/containerd/config.toml` | relative to the host root |
| `systemd-unit-name` | `containerd.service` | units separated by commas or spaces; the first one that can be restarted is; empty: never restart |
| `containerd-pid-file` | none | a node without systemd: containerd's pid file (relative to the host root), written by the supervisor that starts containerd again when it exits; containerd is restarted by SIGTERM to that pid instead of through systemd |
| `kata-config-path` | the runtime's `etc/configuration-….toml` | where the Kata config is written, relative to the host root |
| `artefacts-dir` | `/usr/share/contrast/runtimes/<platform>` | where the installer finds the artefacts (in its own file system, not the host's) |
| `emulated-python` | none | emulated platforms: the node's Python with Contrast installed, which runs the runtime; none: the installer copies its own Python (the node-installer image's) into the runtime's directory and the runtime runs that |
| `emulated-runc` | `runc` | emulated platforms: the node's runc (a bare name is looked up in containerd's PATH) |
"""  # noqa: E501

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contrast.nodeinstaller.errors import TargetConfigError

DEFAULT_CONTAINERD_CONFIG = "etc/containerd/config.toml"
DEFAULT_UNIT = "containerd.service"
_UNIT_SEPARATORS = re.compile(r"[\s,]+")


def _host_relative(value: str) -> str:
    """A host path as a relative path (a leading `/` is allowed), never leaving the host root."""
    path = PurePosixPath(value.strip().lstrip("/"))
    if not path.parts or path == PurePosixPath("."):
        raise ValueError(f"{value!r} names no file")
    if ".." in path.parts:
        raise ValueError(f"{value!r} leaves the host root")
    return str(path)


class TargetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    containerd_config_path: str = Field(
        default=DEFAULT_CONTAINERD_CONFIG, alias="containerd-config-path"
    )
    systemd_unit_name: str = Field(default=DEFAULT_UNIT, alias="systemd-unit-name")
    containerd_pid_file: str | None = Field(default=None, alias="containerd-pid-file")
    kata_config_path: str | None = Field(default=None, alias="kata-config-path")
    artefacts_dir: str | None = Field(default=None, alias="artefacts-dir")
    emulated_python: str | None = Field(default=None, alias="emulated-python")
    emulated_runc: str = Field(default="runc", alias="emulated-runc")

    @field_validator("containerd_config_path", "kata_config_path", "containerd_pid_file")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        return None if value is None else _host_relative(value)

    @field_validator("emulated_python", "emulated_runc")
    @classmethod
    def _program(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not value or "\n" in value or "\0" in value:
            raise ValueError("names no program")
        return value

    @field_validator("artefacts_dir")
    @classmethod
    def _directory(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty")
        return None if value is None else value.strip()

    @property
    def units(self) -> tuple[str, ...]:
        """The systemd units to try, in order; empty means containerd is never restarted."""
        return tuple(unit for unit in _UNIT_SEPARATORS.split(self.systemd_unit_name) if unit)


def load_target_config(path: Path | None) -> TargetConfig:
    """The target config at `path` (a ConfigMap directory or a JSON file); None gives defaults."""
    if path is None:
        return TargetConfig()
    if path.is_dir():
        values: object = _read_directory(path)
    elif path.is_file():
        try:
            values = json.loads(path.read_bytes())
        except (OSError, ValueError) as error:
            raise TargetConfigError(
                f"target config {path} is not readable JSON: {error}",
                hint="give a JSON object of strings, or a directory with one file per key",
            ) from error
    else:
        raise TargetConfigError(
            f"target config {path} does not exist",
            hint="leave out --target-config to use the defaults",
        )
    if not isinstance(values, dict):
        raise TargetConfigError(f"target config {path} is not a JSON object")
    try:
        return TargetConfig.model_validate(values)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'config'}: {problem['msg']}"
            for problem in error.errors()
        )
        raise TargetConfigError(
            f"target config {path} is invalid: {problems}",
            hint="known keys: " + ", ".join(_known_keys()),
        ) from error


def _known_keys() -> list[str]:
    return [field.alias or name for name, field in TargetConfig.model_fields.items()]


def _read_directory(path: Path) -> dict[str, str]:
    values = {}
    for entry in sorted(path.iterdir()):
        if entry.name.startswith(".."):
            continue  # kubelet's atomic-update links (`..data`, `..2024_…`)
        try:
            values[entry.name] = entry.read_text().strip()
        except (OSError, UnicodeDecodeError) as error:
            raise TargetConfigError(f"cannot read target config key {entry}: {error}") from error
    return values
