"""The recorded runtime hashes: current, and used only for the inputs they were derived from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrast import platforms, runtimehashes
from contrast.nodeinstaller import runtime
from tests.fresh_python import printed_by


def test_the_recorded_hashes_are_current(tmp_path: Path) -> None:
    """Fails after a change to the node installer or a description: run
    `python -m contrast.runtimehashes` and commit `nodeinstaller/runtime-hashes.json`."""
    shipped = json.loads((Path(runtime.__file__).parent / runtimehashes.FILE_NAME).read_text())
    assert shipped == runtimehashes.entries()
    written = runtimehashes.write(tmp_path / "hashes.json")
    assert json.loads(written.read_text()) == shipped


def test_the_digest_is_the_installers() -> None:
    assert runtimehashes.installer_source_digest() == runtime.installer_source_digest()


@pytest.mark.parametrize("platform", platforms.PLATFORMS, ids=lambda p: p.name)
def test_a_recorded_hash_is_the_derived_one(platform: platforms.Platform) -> None:
    assert runtimehashes.recorded(platform.name) == runtime.runtime_hash_of(
        runtime.load_runtime(platform.name)
    )


def test_a_changed_input_is_derived_again(monkeypatch: pytest.MonkeyPatch) -> None:
    name = platforms.PLATFORMS[0].name
    description = runtimehashes.description_bytes(name)
    assert description is not None
    monkeypatch.setattr(runtimehashes, "description_bytes", lambda _: description + b" ")
    assert runtimehashes.recorded(name) is None
    monkeypatch.undo()
    monkeypatch.setattr(runtimehashes, "installer_source_digest", lambda: "0" * 64)
    assert runtimehashes.recorded(name) is None
    monkeypatch.undo()
    assert runtimehashes.recorded("no-such-platform") is None


def test_generate_does_not_import_pydantic_for_runtime_class_names() -> None:
    """What the recorded hashes are for: naming a runtime class loads no pydantic model."""
    code = (
        "import sys; from contrast import platforms;"
        " names = [p.runtime_class_name for p in platforms.PLATFORMS];"
        " print('pydantic' in sys.modules)"
    )
    assert printed_by(code) == ["False"]
