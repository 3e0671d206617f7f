"""Staged writes: a staged text is put in place only while it is still the file's text, and a
run that fails leaves no staged file behind (contrast.generate.staging)."""

from __future__ import annotations

from pathlib import Path

import pytest

from contrast.generate.staging import StagedWrites
from contrast.kuberesource import yamlio
from contrast.kuberesource.yamlmemo import FILE, YamlMemo

TEXT = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: '1'\n"


def _file(tmp_path: Path, name: str = "config.yml") -> yamlio.ResourceFile:
    path = tmp_path / name
    path.write_text(TEXT)
    return yamlio.load(path, plain=True)


def _others(tmp_path: Path, *names: str) -> list[str]:
    return sorted(path.name for path in tmp_path.iterdir() if path.name not in names)


def test_a_staged_text_is_put_in_place_and_remembered(tmp_path: Path) -> None:
    file = _file(tmp_path)
    file.documents[0]["data"]["b"] = "2"
    memo = YamlMemo(tmp_path / FILE, "a" * 64)
    with StagedWrites() as staged:
        staged.stage(file, *file.dumped())
        assert (tmp_path / "config.yml").read_text() == TEXT  # not in place yet
        assert staged.write([file], memo) == [True]
    assert (tmp_path / "config.yml").read_text() == TEXT + "  b: '2'\n"
    assert _others(tmp_path, "config.yml") == []
    assert memo.lookup(TEXT + "  b: '2'\n") is not None


def test_a_file_changed_after_staging_is_written_as_it_is_now(tmp_path: Path) -> None:
    file = _file(tmp_path)
    file.documents[0]["data"]["b"] = "2"
    with StagedWrites() as staged:
        staged.stage(file, *file.dumped())
        file.documents[0]["data"]["c"] = "3"  # after the text was staged
        assert staged.write([file]) == [True]
    assert (tmp_path / "config.yml").read_text() == TEXT + "  b: '2'\n  c: '3'\n"
    assert _others(tmp_path, "config.yml") == []


def test_an_unchanged_file_is_not_staged_or_written(tmp_path: Path) -> None:
    file = _file(tmp_path)
    before = (tmp_path / "config.yml").stat().st_mtime_ns
    with StagedWrites() as staged:
        staged.stage(file, *file.dumped())
        assert _others(tmp_path, "config.yml") == []
        assert staged.write([file]) == [False]
    assert (tmp_path / "config.yml").stat().st_mtime_ns == before


def test_a_run_that_fails_after_staging_leaves_the_files_as_they_were(tmp_path: Path) -> None:
    files = [_file(tmp_path, f"config-{index}.yml") for index in range(5)]
    for file in files:
        file.documents[0]["data"]["b"] = "2"

    def run() -> None:
        with StagedWrites() as staged:
            for file in files:
                staged.stage(file, *file.dumped())
            raise RuntimeError("a later step failed")

    with pytest.raises(RuntimeError, match="later step"):
        run()
    assert sorted(path.name for path in tmp_path.iterdir()) == [file.path.name for file in files]
    assert all(file.path.read_text() == TEXT for file in files)


def test_the_file_mode_is_kept(tmp_path: Path) -> None:
    file = _file(tmp_path)
    file.path.chmod(0o640)
    file.documents[0]["data"]["b"] = "2"
    with StagedWrites() as staged:
        staged.stage(file, *file.dumped())
        staged.write([file])
    assert file.path.stat().st_mode & 0o777 == 0o640


def test_a_text_staged_for_another_content_is_not_put_in_place(tmp_path: Path) -> None:
    """What a worker hands over is checked against this process's documents before the rename."""
    file = _file(tmp_path)
    file.documents[0]["data"]["b"] = "2"
    content, text = file.dumped()
    memo = YamlMemo(tmp_path / FILE, "a" * 64)
    with StagedWrites() as staged:
        staged.stage(file, "0" * 64, "kind: Wrong\n")  # a worker that had another content
        assert staged.write([file], memo) == [True]
        assert staged.written_fingerprints() == {}
    assert (tmp_path / "config.yml").read_text() == text
    assert memo.lookup("kind: Wrong\n") is None
    assert _others(tmp_path, "config.yml") == []
    assert content
