"""The seeds' deployment steps on a runtime built from a Kata release, up to `generate` and `set`.

Run in the workspace as the README says: `runtime build`, `coordinator-resources`, `generate`
without any reference-values flag. The manifest's reference values for the platform are exactly
the built ones, every confidential pod runs on the built handler, and `set` refuses until the
operator values are filled in.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from contrast.cli.main import main
from contrast.kuberesource.workloads import workloads
from tests.generate.conftest import EXAMPLES, write_layout
from tests.kata import synthetic

EXPECTED_UNFILLED = {
    "metal-qemu-snp": "MinimumTCB.BootloaderVersion",
    "metal-qemu-tdx": "Rtmrs[0]",
}


@pytest.fixture(scope="module")
def image_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_layout(tmp_path_factory.mktemp("layout"))


def run(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0, argv
    return out.getvalue()


def documents(path: Path) -> list[Any]:
    return [d for d in YAML(typ="safe").load_all(path.read_text()) if d]


@pytest.mark.parametrize("platform", ["metal-qemu-snp", "metal-qemu-tdx"])
def test_from_a_kata_release_to_a_manifest(
    platform: str,
    tmp_path: Path,
    image_layout: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    release = synthetic.tarball(
        synthetic.files(), tmp_path / "kata-static-3.99.0-amd64.tar.zst", "zst"
    )
    workspace = tmp_path / "workspace"
    (workspace / "resources").mkdir(parents=True)
    shutil.copytree(EXAMPLES / "sidecar-tls", workspace / "resources", dirs_exist_ok=True)
    monkeypatch.chdir(workspace)

    # 1. contrast runtime build --kata-release kata-static-….tar.zst --platform P
    built = run("runtime", "build", "--kata-release", str(release), "--platform", platform,
                "--max-vcpus", "2")  # fmt: skip
    handler = built.split()[1]
    assert handler.startswith(f"contrast-cc-{platform}-")
    runtime_class, _ = documents(workspace / f"runtime-{platform}.yml")
    assert runtime_class["handler"] == handler
    # 2. contrast coordinator-resources --platform P > resources/coordinator.yml
    coordinator = run("coordinator-resources", "--platform", platform)
    (workspace / "resources" / "coordinator.yml").write_text(coordinator)
    # 3. contrast generate --reference-values P resources/  (images from a local layout)
    capsys.readouterr()
    run("generate", "--reference-values", platform, "--oci-layout", str(image_layout), "resources/")

    built_values = json.loads((workspace / "reference-values.json").read_text())
    assert list(built_values) == [handler]
    manifest = json.loads((workspace / "manifest.json").read_text())
    assert manifest["ReferenceValues"] == built_values[handler]
    pods = [
        workload
        for path in sorted((workspace / "resources").glob("*.yml"))
        for workload in workloads(documents(path))
    ]
    assert len(pods) == 3  # web, backend, the Coordinator
    assert {pod.runtime_class_name for pod in pods} == {handler}

    # 4./5. kubectl apply …; contrast set: refused while an operator value is missing.
    capsys.readouterr()
    assert main(["set", "-c", "127.0.0.1:9", "resources/"]) == 1
    err = capsys.readouterr().err
    assert EXPECTED_UNFILLED[platform] in err
    assert "expected-missing" in err
    assert len(err.strip().splitlines()) == 1
