"""Runtimes the tests build themselves: artefact files, their description, a scratch host root."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from contrast.nodeinstaller.layout import artefact_slots, kata_config_relative
from contrast.nodeinstaller.restart import CommandResult
from contrast.platforms import Platform, by_name
from contrast.runtimedescription.digest import handler_of, stamp_artefact
from contrast.runtimedescription.model import INSTALL_PREFIX, Build, RuntimeDescription

# Larger than the 1 MiB read chunk, so hashing and copying cross chunk boundaries.
ROOTFS_SIZE = (2 << 20) + 123


@dataclass(frozen=True)
class BuiltRuntime:
    platform: Platform
    description: RuntimeDescription
    artefacts: Path

    @property
    def name(self) -> str:
        return handler_of(self.description)


def build_runtime(platform: Platform, directory: Path, *, salt: str = "") -> BuiltRuntime:
    """Artefact files for `platform` in `directory` and the description a release build writes."""
    artefacts = []
    for slot in artefact_slots(platform):
        data = f"{slot.name} of {platform.name} {salt}\n".encode()
        if slot.name == "rootfs":
            data = (data * (ROOTFS_SIZE // len(data) + 1))[:ROOTFS_SIZE]
        path = directory / slot.relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        artefacts.append(
            stamp_artefact(
                name=slot.name,
                role=slot.role,
                relative=slot.relative,
                file=path,
                executable=slot.executable,
            )
        )
    description = RuntimeDescription(
        format=1,
        platform=platform.name,
        build=Build.RELEASE,
        kernel_params="console=hvc0 systemd.verity=1",
        kata_config=f"{INSTALL_PREFIX}{kata_config_relative(platform)}",
        artefacts=tuple(artefacts),
    )
    return BuiltRuntime(platform, description, directory)


@pytest.fixture
def runtime(tmp_path: Path) -> BuiltRuntime:
    return build_runtime(by_name("metal-qemu-snp"), tmp_path / "artefacts")


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    (root / "etc" / "containerd").mkdir(parents=True)
    return root


Snapshot = dict[str, tuple[int, bytes | str | None]]


def snapshot(root: Path) -> Snapshot:
    """Every path under `root` with its mode and content (file bytes, link target)."""
    result: Snapshot = {}
    for directory, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(directory) / name
            status = path.lstat()
            content: bytes | str | None = None
            if stat.S_ISLNK(status.st_mode):
                content = os.readlink(path)
            elif stat.S_ISREG(status.st_mode):
                content = path.read_bytes()
            result[str(path.relative_to(root))] = (status.st_mode, content)
    return result


class RecordingRunner:
    """A runner that records each command and answers with a given exit code per unit."""

    def __init__(self, failing_units: frozenset[str] = frozenset()) -> None:
        self.calls: list[list[str]] = []
        self.failing_units = failing_units

    def __call__(self, argv: object) -> CommandResult:
        assert isinstance(argv, list | tuple)
        self.calls.append([str(argument) for argument in argv])
        if any(unit in self.failing_units for unit in self.calls[-1]):
            return CommandResult(1, "Unit not found.")
        return CommandResult(0, "")
