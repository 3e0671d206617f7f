"""`contrast generate` as a command on N workloads with cached images (issue 14's goals).

The workspace holds the Coordinator and N Deployments (10 distinct images from a local OCI
layout). A first run creates the keys and fills `layers-cache.json`. Then, each as its own
process (median of 3): generate on the user's YAML again (every document changes: policies
derived, sidecars injected, files rewritten) and an unchanged re-run (nothing written), with the
policy cache and without it (every policy derived again); the CPU time of each, worker processes
included, is printed too.
Goals: 100 workloads ≤ 1 s, 1000 ≤ 6 s, ≤ 5 ms a workload, an unchanged re-run of 100 ≤ 0.5 s.
For scale, the round trip of the user's documents (read into ruamel's round-trip tree, write
back) is timed with ruamel alone and the way generate does it (libyaml's events and yamlrtdump).

Run: `.venv/bin/python bench/bench_generate.py [workloads]`.
"""

from __future__ import annotations

import io
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the image builder of the tests

from tests.generate.conftest import write_layout  # noqa: E402

from contrast.cli.generate import POLICY_CACHE  # noqa: E402
from contrast.cli.main import main as contrast  # noqa: E402
from contrast.generate.parallel import workers  # noqa: E402
from contrast.kuberesource import yamlio, yamlrtdump, yamlrtload  # noqa: E402
from timing import INSTALLED_ENV, write_byte_code  # noqa: E402  (bench/timing.py)

# Issue 14's goals on a 2-core machine, as commands: count → (generate, unchanged re-run).
GOALS: dict[int, tuple[float, float | None]] = {100: (1.0, 0.5), 1000: (6.0, None)}
PER_WORKLOAD_MS = 5.0
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


def command(workspace: Path, layout: Path) -> list[str]:
    return [
        "generate",
        "--workspace-dir",
        str(workspace),
        "--reference-values",
        "emulated-snp",
        "--oci-layout",
        str(layout),
        str(workspace / "resources"),
    ]


def run(workspace: Path, layout: Path) -> float:
    """One generate in this process (imports already paid)."""
    started = time.perf_counter()
    # The report and the (expected: tags, not digests) warnings are not what is measured.
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        code = contrast(command(workspace, layout))
    took = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"generate failed with exit code {code}")
    return took


def run_process(workspace: Path, layout: Path, cpu: list[float] | None = None) -> float:
    """One `contrast generate` as a user runs it: a process of its own.

    Its CPU time (with its worker processes) goes to `cpu`: on a busy machine the wall time
    says more about the neighbours than about generate.
    """
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "contrast.cli.main", *command(workspace, layout)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=INSTALLED_ENV,
    )
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime)
    return took


def write_inputs(resources: Path, count: int, coordinator: str) -> None:
    """The user's YAML: the Coordinator and `count` Deployments, as before any generate."""
    (resources / "coordinator.yml").write_text(coordinator)
    for index in range(count):
        (resources / f"service-{index}.yml").write_text(deployment(index))


def round_trips(resources: Path) -> tuple[float, float]:
    """Seconds to read and write back the user's Deployments: with ruamel, and as generate does."""
    texts = [path.read_text() for path in sorted(resources.glob("service-*.yml"))]
    indentation = yamlio.guess_indentation(texts[0])
    ruamel = yamlio._yaml(indentation)
    started = time.perf_counter()
    for text in texts:
        ruamel.dump(ruamel.load(text), io.StringIO())
    with_ruamel = time.perf_counter() - started
    started = time.perf_counter()
    for text in texts:
        written = yamlrtdump.dump(
            yamlrtload.load(text),
            mapping=indentation.mapping,
            sequence=indentation.sequence,
            offset=indentation.offset,
            explicit_start=False,
        )
        assert written is not None, "the fast round trip declined a bench document"
    return with_ruamel, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    count = int(arguments[0]) if arguments else 100
    write_byte_code()
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        layout = write_layout(root / "layout", IMAGES)
        resources = root / "workspace" / "resources"
        resources.mkdir(parents=True)
        coordinator = io.StringIO()
        with redirect_stdout(coordinator):
            contrast(["coordinator-resources", "--platform", "emulated-snp"])
        write_inputs(resources, count, coordinator.getvalue())
        first = run(root / "workspace", layout)  # keys, layer cache
        fresh: list[float] = []
        fresh_cpu: list[float] = []
        for _ in range(3):  # the user's YAML again: every document changes
            write_inputs(resources, count, coordinator.getvalue())
            fresh.append(run_process(root / "workspace", layout, fresh_cpu))
        rerun_cpu: list[float] = []
        rerun = [  # nothing changes (the first reads what the last generate wrote)
            run_process(root / "workspace", layout, rerun_cpu) for _ in range(3)
        ]
        cold_cpu: list[float] = []
        cold = []
        for _ in range(3):  # nothing changes, but every policy is derived again
            (root / "workspace" / POLICY_CACHE).unlink(missing_ok=True)
            cold.append(run_process(root / "workspace", layout, cold_cpu))
        write_inputs(resources, count, coordinator.getvalue())
        timed = [round_trips(resources) for _ in range(3)]
        with_ruamel, fast = min(t[0] for t in timed), min(t[1] for t in timed)
    goal = GOALS.get(count)
    fresh_s, rerun_s = statistics.median(fresh), statistics.median(rerun)
    print(f"workloads:                  {count} (+ the Coordinator), {len(IMAGES)} images")
    print(f"first run (keys, cache):    {first:.2f} s, in process")
    print(
        f"generate, as a command:     {fresh_s:.2f} s ({fresh_s / count * 1e3:.1f} ms/workload,"
        f" goal ≤ {PER_WORKLOAD_MS:.0f} ms){_goal(fresh_s, goal and goal[0])}"
    )
    print(
        f"unchanged re-run, command:  {rerun_s:.2f} s{_goal(rerun_s, goal and goal[1])}"
        f"  (the first, right after generate changed every file: {rerun[0]:.2f} s)"
    )
    print(f"  without the policy cache: {statistics.median(cold):.2f} s")
    print(
        f"CPU time (all processes):   generate {statistics.median(fresh_cpu):.2f} s,"
        f" re-run {statistics.median(rerun_cpu):.2f} s,"
        f" without the cache {statistics.median(cold_cpu):.2f} s ({workers()} processes)"
    )
    print(
        f"YAML round trip, in process: {fast / count * 1e3:.2f} ms a document as generate does it,"
        f" {with_ruamel / count * 1e3:.2f} ms with ruamel alone"
    )
    return 0


def _goal(value: float, goal: float | None) -> str:
    if not goal:
        return ""
    return f"  (goal ≤ {goal:.1f} s: {'met' if value <= goal else 'MISSED'})"


if __name__ == "__main__":
    sys.exit(main())
