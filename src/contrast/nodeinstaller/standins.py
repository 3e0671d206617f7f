"""Placeholder artefacts for a repository without a guest-image build.

The runtime descriptions committed in `contrast/runtimedescription/runtimes` are stamped from
these files, so their digests are reproducible rather than invented: `python -m
contrast.nodeinstaller.standins` rewrites them, and `write_standins` lays the files out for trying
the installer on a scratch host root. A stand-in is a short text naming itself; a runtime made of
them installs, but no VM can start.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from contrast.files import write_atomically
from contrast.nodeinstaller.layout import ArtefactSlot, artefact_slots, kata_config_relative
from contrast.platforms import PLATFORMS, Platform
from contrast.runtimedescription.digest import stamp_artefact
from contrast.runtimedescription.model import (
    DESCRIPTION_FORMAT,
    INSTALL_PREFIX,
    Build,
    RuntimeDescription,
)
from contrast.runtimedescription.shipped import SHIPPED_FOLDER

STAND_IN_KERNEL_PARAMS = ""


def standin_bytes(platform: Platform, slot: ArtefactSlot) -> bytes:
    return f"contrast stand-in artefact {slot.name} of platform {platform.name}\n".encode()


def write_standins(platform: Platform, directory: Path) -> None:
    """The stand-in files of `platform`, laid out as the installer's artefact source directory."""
    for slot in artefact_slots(platform):
        mode = 0o755 if slot.executable else 0o644
        write_atomically(directory / slot.relative, standin_bytes(platform, slot), mode=mode)


def describe_standins(platform: Platform, directory: Path) -> RuntimeDescription:
    """The description a build would write for the stand-ins in `directory`."""
    kata_config = kata_config_relative(platform)
    return RuntimeDescription(
        format=DESCRIPTION_FORMAT,
        platform=platform.name,
        build=Build.STAND_IN,
        kernel_params=STAND_IN_KERNEL_PARAMS,
        kata_config=None if kata_config is None else f"{INSTALL_PREFIX}{kata_config}",
        artefacts=tuple(
            stamp_artefact(
                name=slot.name,
                role=slot.role,
                relative=slot.relative,
                file=directory / slot.relative,
                executable=slot.executable,
            )
            for slot in artefact_slots(platform)
        ),
    )


def main(folder: Path = SHIPPED_FOLDER) -> None:
    """Rewrite every platform's committed description from freshly written stand-ins."""
    for platform in PLATFORMS:
        with tempfile.TemporaryDirectory() as scratch:
            write_standins(platform, Path(scratch))
            description = describe_standins(platform, Path(scratch))
        write_atomically(folder / f"{platform.name}.json", description.to_json().encode())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else SHIPPED_FOLDER)
