"""`contrast-build-images` without --output builds nothing: one line, exit 1, before any work."""

from __future__ import annotations

import pytest

from contrast.imagebuild.cli import UsageError, main
from contrast.imagebuild.lock import BuildError


def test_a_build_without_output_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 1
    assert capsys.readouterr().err == (
        "contrast-build-images: --output DIR is required to build (or --relock)\n"
    )


def test_with_debug_the_refusal_is_imagebuilds_own_error() -> None:
    with pytest.raises(UsageError) as refused:
        main(["--debug"])
    assert isinstance(refused.value, BuildError)
