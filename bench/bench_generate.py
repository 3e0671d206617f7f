"""`contrast generate` on 100 workloads with cached images, against its floor: the YAML round trip.

The workspace holds the Coordinator and 100 Deployments (10 distinct images from a local OCI
layout). A first run creates the keys and fills `layers-cache.json`; the timed runs are what a user
sees when re-running generate after an edit: every policy is derived again, every image's config
is read again, layers come from the cache. The baseline is loading and dumping the same YAML
files with the same reader, which generate cannot avoid. Prints both and their ratio; the goal is
≤ 3 s for the whole run.

Run: `.venv/bin/python bench/bench_generate.py [workloads]`.
"""

from __future__ import annotations

import io
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the image builder of the tests

from tests.generate.conftest import write_layout  # noqa: E402

from contrast.cli.main import main as contrast  # noqa: E402
from contrast.kuberesource import yamlio  # noqa: E402

GOAL_SECONDS = 3.0
IMAGES = tuple(f"ghcr.io/bench/service-{index}:1.0" for index in range(10))


def deployment(index: int) -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: service-{index}
  namespace: bench
spec:
  replicas: 2
  selector:
    matchLabels:
      app: service-{index}
  template:
    metadata:
      labels:
        app: service-{index}
      annotations:
        contrast.edgeless.systems/servicemesh-ingress: "api#8080#false"
    spec:
      runtimeClassName: contrast-cc
      containers:
        - name: service
          image: {IMAGES[index % len(IMAGES)]}
          args: ["--port", "8080", "--replica", "{index}"]
          env:
            - name: SERVICE_INDEX
              value: "{index}"
          resources:
            limits:
              memory: 64Mi
            requests:
              memory: 64Mi
"""


def run(workspace: Path, layout: Path) -> float:
    argv = [
        "generate",
        "--workspace-dir",
        str(workspace),
        "--reference-values",
        "emulated-snp",
        "--oci-layout",
        str(layout),
        str(workspace / "resources"),
    ]
    started = time.perf_counter()
    # The report and the (expected: tags, not digests) warnings are not what is measured.
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        code = contrast(argv)
    took = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"generate failed with exit code {code}")
    return took


def round_trip(resources: Path) -> float:
    started = time.perf_counter()
    for file in yamlio.load_paths([resources]):
        file.dump()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    count = int(arguments[0]) if arguments else 100
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        layout = write_layout(root / "layout", IMAGES)
        resources = root / "workspace" / "resources"
        resources.mkdir(parents=True)
        coordinator = io.StringIO()
        with redirect_stdout(coordinator):
            contrast(["coordinator-resources", "--platform", "emulated-snp"])
        (resources / "coordinator.yml").write_text(coordinator.getvalue())
        for index in range(count):
            (resources / f"service-{index}.yml").write_text(deployment(index))

        first = run(root / "workspace", layout)
        generate = min(run(root / "workspace", layout) for _ in range(3))
        floor = min(round_trip(resources) for _ in range(3))
    print(f"workloads:                  {count} (+ the Coordinator), {len(IMAGES)} images")
    print(f"first run (keys, cache):    {first:.2f} s")
    per_workload = generate / count * 1e3
    print(f"generate, images cached:    {generate:.2f} s ({per_workload:.1f} ms/workload)")
    print(f"YAML load + dump (floor):   {floor:.2f} s")
    print(f"ratio generate / floor:     {generate / floor:.1f}")
    verdict = "met" if generate <= GOAL_SECONDS else "MISSED"
    print(f"goal ≤ {GOAL_SECONDS:.0f} s:                   {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
