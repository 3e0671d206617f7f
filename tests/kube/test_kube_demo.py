"""`contrast demo --kubernetes` on the test cluster: the mesh-app flow, one numbered line a step.

The demo is what a newcomer runs (README "On Kubernetes"); this runs it on the session's cluster
with the emulated runtime installed, as the CLI would, and reads its lines: every step done, in
order, each saying what it showed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from contrast.local.kubedemo import PLATFORM, run_kubernetes_demo
from tests.imagebuild.builder import BuiltImages
from tests.kube.cluster import SCRIPT, Cluster

STEPS = 12


@pytest.fixture(scope="module")
def release_layout(request: pytest.FixtureRequest) -> Path:
    """As in test_mesh_app_on_cluster: CONTRAST_TEST_IMAGES=DIR or the session's images."""
    reuse = os.environ.get("CONTRAST_TEST_IMAGES")
    if reuse:
        return Path(reuse).resolve()
    built: BuiltImages = request.getfixturevalue("built_images")
    return built.layout


def test_kubernetes_demo_runs_every_step(
    kube_cluster: Cluster, release_layout: Path, tmp_path: Path
) -> None:
    installed = subprocess.run(
        ["bash", str(SCRIPT), "install-runtime", str(kube_cluster.directory), PLATFORM,
         sys.executable],
        capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    if installed.returncode:
        pytest.fail(f"cluster.sh install-runtime failed:\n{installed.stderr.decode()[-4000:]}")
    lines: list[str] = []
    run_kubernetes_demo(kube_cluster.directory, tmp_path, release_layout, say=lines.append)
    print("\n".join(lines))
    steps = [line for line in lines if "✔" in line]
    assert [line.split("]")[0] for line in steps] == [f"[{n:2}" for n in range(1, STEPS + 1)]
    said = "\n".join(steps)
    assert "api {'service': 'api', 'version': 'v1'}" in said
    assert "plain TCP, no certificate and a forged one refused; web's answered" in said
    assert "web → api: {'error':" in said
    assert "api {'service': 'api', 'version': 'v2'}" in said
    assert "web's old certificate refused" in said
    assert lines[-1].startswith("done in ")
    assert (tmp_path / "verify" / "manifest.1.json").is_file()
