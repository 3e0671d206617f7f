"""generate skips the schema check only of resources that passed it before, byte for byte.

A re-run over generate's output checks no resource (and changes no file, the cache included),
because the first run recorded what it wrote; after one byte of one resource changed, that
resource alone is checked again; a resource the check refuses is refused on every run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contrast.generate import parallel
from contrast.kuberesource import schema
from contrast.kuberesource.schemacache import FILE
from tests.generate.conftest import GenerateWorkspace


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Where `schema.check` ran ("" for a form generate wrote), counted in this process."""
    monkeypatch.setenv(parallel.ENVIRONMENT, "1")
    where_checked: list[str] = []
    original = schema.check

    def counting(resource: Any, where: str) -> None:
        where_checked.append(where)
        original(resource, where)

    monkeypatch.setattr(schema, "check", counting)
    return where_checked


def test_a_rerun_checks_nothing_and_a_changed_byte_is_checked_again(
    workspace: GenerateWorkspace, checked: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("emulated-snp")
    arguments = ("--reference-values", "emulated-snp", str(workspace.resources))
    assert workspace.generate(*arguments) == 0
    # Each resource as read, and each confidential one as written again, for the next run.
    read = [where for where in checked if where]
    assert len(read) > 2
    passed = json.loads((workspace.root / FILE).read_text())["passed"]
    assert len(passed) == len(checked) + 2  # and the manifest written, and the rules

    checked.clear()
    before = _files(workspace.root)
    assert workspace.generate(*arguments) == 0
    assert checked == [], "an unchanged re-run checked resources"
    assert _files(workspace.root) == before

    (path,) = [p for p in workspace.resources.iterdir() if p.name != "coordinator.yml"][:1]
    text = path.read_text()
    assert "name: " in text
    path.write_text(text.replace("name: ", "name: x", 1))
    assert workspace.generate(*arguments) == 0
    assert str(path) in checked[0]
    assert checked[1:] == [""]  # and as written, for the next run
    capsys.readouterr()


def test_a_run_over_the_users_yaml_again_keeps_what_the_next_run_reads(
    workspace: GenerateWorkspace, checked: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The user's YAML restored and one resource changed (a CI job regenerating from git): the
    written forms that were known already stay recorded when the file is written again, so the
    re-run over that output checks nothing."""
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("emulated-snp")
    users = {path: path.read_bytes() for path in workspace.resources.iterdir()}
    arguments = ("--reference-values", "emulated-snp", str(workspace.resources))
    assert workspace.generate(*arguments) == 0
    for path, text in users.items():
        path.write_bytes(text)
    (path,) = [p for p in users if p.name != "coordinator.yml"][:1]
    path.write_text(path.read_text().replace("name: ", "name: x", 1))
    assert workspace.generate(*arguments) == 0
    checked.clear()
    assert workspace.generate(*arguments) == 0
    assert checked == [], "a re-run over generate's output checked resources"
    capsys.readouterr()


def test_a_refused_resource_is_refused_on_every_run(
    workspace: GenerateWorkspace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(parallel.ENVIRONMENT, "1")
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("emulated-snp")
    arguments = ("--reference-values", "emulated-snp", str(workspace.resources))
    assert workspace.generate(*arguments) == 0
    capsys.readouterr()
    cache = (workspace.root / FILE).read_bytes()
    (path,) = [p for p in workspace.resources.iterdir() if p.name != "coordinator.yml"][:1]
    path.write_text(path.read_text().replace("\n  name: ", "\n  name: 7\n  x: ", 1))
    for _ in range(2):
        assert workspace.generate(*arguments) != 0
        assert "contrast:" in capsys.readouterr().err
        assert (workspace.root / FILE).read_bytes() == cache
