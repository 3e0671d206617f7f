"""The release images, built once per test session (about two minutes; wheels are cached).

The build runs for real: `mmdebstrap` against deb.debian.org (as root, or in a user namespace),
pip against PyPI, from this checkout. If it cannot run, the tests that need it fail: CI installs
everything it needs through scripts/system-deps.sh.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from contrast.imagebuild.build import Release, build
from contrast.imagebuild.cli import DEFAULT_EPOCH
from contrast.imagebuild.lock import Lock

REPOSITORY = Path(__file__).parents[2]
WHEEL_CACHE = Path(os.environ.get("CONTRAST_WHEEL_CACHE", Path.home() / ".cache/contrast/wheels"))


@dataclass(frozen=True)
class BuiltImages:
    layout: Path
    release: Release

    def digest(self, name: str) -> str:
        return next(image.digest for image in self.release.images if image.name == name)


def build_into(directory: Path) -> BuiltImages:
    lock = Lock.from_file(REPOSITORY / "images/lock.json")
    release = build(REPOSITORY, directory, lock=lock, cache=WHEEL_CACHE, epoch=DEFAULT_EPOCH)
    return BuiltImages(directory, release)


@pytest.fixture(scope="session")
def built_images(tmp_path_factory: pytest.TempPathFactory) -> BuiltImages:
    return build_into(tmp_path_factory.mktemp("images") / "layout")
