"""Synthetic Kata releases (tests.kata.synthetic) as trees and tarballs, and builds of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from contrast.kata.build import BuildRequest, BuiltRuntime, build_runtime
from contrast.platforms import by_name
from tests.kata import synthetic


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """The synthetic release unpacked: `release/opt/kata/...`."""
    return synthetic.write_tree(tmp_path / "release", synthetic.files())


def build(release: Path, platform: str, output: Path, **options: object) -> BuiltRuntime:
    return build_runtime(BuildRequest(release, by_name(platform), output, **options))  # type: ignore[arg-type]
