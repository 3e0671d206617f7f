"""generate writes the same bytes whether it reads with libyaml first or with ruamel alone.

`generate` reads resources with `yamlfast` and parses a document with ruamel only when it
changes it (issue 14); before, ruamel read everything. Both ways run here on the seeds' examples
in twin workspaces (same keys, same emulated TEE), a first run and a re-run, and every file must
be byte for byte the same. The re-run takes the documents it wrote from the YAML memo
(`yaml-cache.txt`), so this also shows that what the memo says is what ruamel reads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from contrast.kuberesource import yamlfast, yamlio
from contrast.kuberesource.yamlmemo import FILE
from tests.generate.conftest import GenerateWorkspace

EXAMPLES = {
    "sidecar-tls": "emulated-snp",
    "kustomize-app": "emulated-snp",
    "multi-runtime": "metal-qemu-snp",
    "gpu": "metal-qemu-snp-gpu",
}


def _files(root: Path) -> dict[str, bytes]:
    """Every file but the YAML memo, which holds what each reader read (the twin's none)."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != FILE
    }


@pytest.mark.parametrize(("example", "platform"), EXAMPLES.items(), ids=EXAMPLES.keys())
def test_generate_writes_what_ruamel_alone_wrote(
    workspace: GenerateWorkspace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    example: str,
    platform: str,
) -> None:
    workspace.add_example(example)
    workspace.add_coordinator(platform)
    # Keys and the emulated TEE first, so that the twins share them.
    arguments = ("--reference-values", platform, str(workspace.resources))
    assert workspace.generate(*arguments) == 0
    twin = GenerateWorkspace(
        workspace.root.parent / "twin", workspace.layout, workspace.reference_values
    )
    shutil.copytree(workspace.root, twin.root)
    for target in (workspace, twin):  # back to the user's input, keeping keys and TEE
        shutil.rmtree(target.resources)
        target.add_example(example)
        target.add_coordinator(platform)
        (target.root / "manifest.json").unlink()
    (twin.root / FILE).unlink()  # what the fast reader read: the twin must parse with ruamel

    reads: list[bool] = []
    original = yamlio.load_text

    def recording(*args: object, **kwargs: object) -> yamlio.ResourceFile:
        file = original(*args, **kwargs)  # type: ignore[arg-type]
        reads.append(file.plain)
        return file

    monkeypatch.setattr(yamlio, "load_text", recording)
    twin_arguments = ("--reference-values", platform, str(twin.resources))
    parsed: list[str] = []
    fast = yamlfast.load_all

    def parsing(text: str) -> object:
        parsed.append(text)
        return fast(text)

    for run in range(2):  # the first run changes every confidential document; the re-run none
        parsed.clear()
        with monkeypatch.context() as counted:
            counted.setattr(yamlfast, "load_all", parsing)
            assert workspace.generate(*arguments) == 0
        if run == 1:
            assert parsed == [], "the re-run parsed files the first run wrote"
        with monkeypatch.context() as ruamel_only:
            ruamel_only.setattr(yamlfast, "load_all", lambda text: None)
            assert twin.generate(*twin_arguments) == 0
        assert _files(workspace.root) == _files(twin.root)
    assert any(reads), "the fast reader was never used"
    assert not all(reads), "the twin read with it too"
    capsys.readouterr()
