"""The CLI reads manifests and seed share documents within bounds (issue 11): one line, no trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrast.cli.main import main

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("command", ["set", "verify", "recover"])
def test_a_deeply_nested_manifest_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    (tmp_path / "manifest.json").write_text(
        json.dumps({"Policies": {}, "x": "y"})[:-1] + f', "z": {DEEP}}}'
    )
    code = main([command, "-c", "127.0.0.1:1", "--workspace-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.count("\n") == 1, err
    assert "the manifest nests deeper than 32 levels" in err
