"""The release images, built for the tests: once per session (`built_images`, about two minutes).

The build runs for real: `mmdebstrap` against deb.debian.org (as root, or in a user namespace),
pip against PyPI, from this checkout. If it cannot run, the tests that need it fail: CI installs
everything it needs through scripts/system-deps.sh.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

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
