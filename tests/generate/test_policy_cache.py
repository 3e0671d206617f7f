"""generate reuses the policies of its previous run only when nothing they came from changed.

An unchanged re-run takes each pod's annotation from the policy cache (no policy derived, no file
changed, the cache included); after one byte of the rules changed every policy is derived again,
and the files are those of a workspace without a cache.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from contrast.policy.cache import FILE
from contrast.policy.generate import PolicyGenerator
from tests.generate.conftest import GenerateWorkspace


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_a_rerun_reuses_and_a_changed_byte_derives(
    workspace: GenerateWorkspace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    derived: list[str] = []
    original = PolicyGenerator.generate

    def counting(self: PolicyGenerator, workload: Any, *args: Any, **kwargs: Any) -> Any:
        derived.append(workload.describe())
        return original(self, workload, *args, **kwargs)

    monkeypatch.setattr(PolicyGenerator, "generate", counting)
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("emulated-snp")
    arguments = ("--reference-values", "emulated-snp", str(workspace.resources))
    assert workspace.generate(*arguments) == 0
    workloads = len(derived)
    entries = json.loads((workspace.root / FILE).read_text())["entries"]
    assert len(entries) == workloads > 1

    derived.clear()
    before = _files(workspace.root)
    assert workspace.generate(*arguments) == 0
    assert derived == [], "an unchanged re-run derived policies"
    assert _files(workspace.root) == before

    twin = GenerateWorkspace(
        workspace.root.parent / "twin", workspace.layout, workspace.reference_values
    )
    shutil.copytree(workspace.root, twin.root)
    for target in (workspace, twin):
        rules = target.root / "rules.rego"
        rules.write_text(rules.read_text().replace("default", "default ", 1))
    (twin.root / FILE).unlink()
    assert workspace.generate(*arguments) == 0
    assert len(derived) == workloads, "a changed rule was not derived again"
    assert twin.generate("--reference-values", "emulated-snp", str(twin.resources)) == 0
    assert _files(workspace.root) == _files(twin.root)  # the caches too: no path in a key
    assert _files(workspace.root) != before
    capsys.readouterr()
