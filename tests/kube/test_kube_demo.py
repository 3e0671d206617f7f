"""`contrast demo --kubernetes` on the test cluster: the mesh-app flow, one numbered line a step.

The demo is what a newcomer runs (README "On Kubernetes"); this runs it on the session's cluster
with the emulated runtime installed, as the CLI would, and reads its lines: every step done, in
order, each saying what it showed.
"""

from __future__ import annotations

from pathlib import Path

from contrast.local.kubedemo import PLATFORM, run_kubernetes_demo
from tests.kube.cluster import Cluster, install_emulated_runtime

STEPS = 12


def test_kubernetes_demo_runs_every_step(
    kube_cluster: Cluster, release_layout: Path, tmp_path: Path
) -> None:
    handler = install_emulated_runtime(kube_cluster, PLATFORM)
    lines: list[str] = []
    run_kubernetes_demo(kube_cluster.directory, tmp_path, release_layout, say=lines.append)
    print("\n".join(lines))
    steps = [line for line in lines if "✔" in line]
    assert [line.split("]")[0] for line in steps] == [f"[{n:2}" for n in range(1, STEPS + 1)]
    said = "\n".join(steps)
    assert f"handler {handler}" in steps[0]
    assert "api {'service': 'api', 'version': 'v1'}" in said
    assert "plain TCP, no certificate and a forged one refused; web's answered" in said
    assert "web → api: {'error':" in said
    assert "api {'service': 'api', 'version': 'v2'}, db's workload secret unchanged" in said
    assert "web's old certificate refused (unknown CA)" in said
    assert lines[-1].startswith("done in ")
    assert (tmp_path / "verify" / "manifest.1.json").is_file()
