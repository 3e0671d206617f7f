"""`contrast set`'s reading of the resources' policies at scale (issue 29: `set` ≤ 3 s at 10 000).

N workload files (default 10 000 Deployments, one file each, as `generate` writes them: the
initdata annotation on the pod template), read by `client.resources.collect_policies` three
ways, taking turns so each sees the same machine load:
- ruamel's safe loader on every file (how `set` read them before: pure Python),
- the reading now without a memo (libyaml through `yamlfast`, ruamel for what it declines),
- the reading now with generate's memo of these files (`yaml-cache.txt`: JSON per document).
The floor is reading the files' bytes and decoding them (`read_bounded`), which every way does.

Two policy sizes: the 300-byte documents of `bench_history_scale` (the issue's 14.5 s was
measured on those) and a generated-size one (the project's rules and settings, a ~16 KB
annotation), on a tenth as many files (ruamel's way would take minutes a round).

Run: `.venv/bin/python bench/bench_set_resources.py [WORKLOADS] [ROUNDS]`.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ruamel.yaml.error import YAMLError

from contrast.boundedfile import read_bounded
from contrast.client import resources
from contrast.kuberesource import yamlbounds, yamlio
from contrast.kuberesource.yamlmemo import YamlMemo
from contrast.policy.initdata import ANNOTATION, Initdata, encode_annotation

ASSETS = Path(resources.__file__).resolve().parents[1] / "policy" / "assets"
GOAL_S = 3.0  # the whole `set` through the CLI, at 10 000 workloads


def small_policy(name: str) -> bytes:
    """bench_history_scale's document of about 300 bytes."""
    return Initdata({"policy.rego": f"package agent_policy\n# {name}\n" + "#" * 200}).to_toml()


def generated_policy(name: str) -> bytes:
    """About the size of a generated one: the rules and settings, and the workload's name."""
    rules = (ASSETS / "rules.rego").read_text() + (ASSETS / "settings.json").read_text()
    return Initdata({"policy.rego": f"{rules}\n# {name}\n"}).to_toml()


def deployment(index: int, annotation: str) -> str:
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
        {ANNOTATION}: {annotation}
    spec:
      runtimeClassName: contrast-cc
      containers:
        - name: app
          image: ghcr.io/bench/service-{index % 10}:1.0@sha256:{"ab" * 32}
          ports:
            - containerPort: 8080
          resources:
            limits:
              memory: 100Mi
"""


def ruamel_reading(directory: Path) -> dict[str, Any]:
    """`collect_policies` as it was before: ruamel's safe loader on every file."""
    found: dict[str, Any] = {}
    for path in resources.yaml_files(directory):
        try:
            data = read_bounded(path, yamlbounds.MAX_FILE_BYTES, what="the resource file")
            documents = yamlbounds.load_all_safe(data.decode(), str(path))
        except (OSError, YAMLError, UnicodeDecodeError) as error:
            raise SystemExit(f"cannot read {path}: {error}") from None
        for document in documents:
            for value in resources._annotation_values(document):
                found[value] = True
    return found


def floor(directory: Path) -> None:
    for path in resources.yaml_files(directory):
        read_bounded(path, yamlbounds.MAX_FILE_BYTES, what="the resource file").decode()


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def run(count: int, rounds: int, make: Callable[[str], bytes], label: str) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as temporary:
        base = Path(temporary)
        directory = base / "resources"
        directory.mkdir()
        tomls = [make(f"w{index}") for index in range(count)]
        for index, toml in enumerate(tomls):
            (directory / f"w{index}.yml").write_text(deployment(index, encode_annotation(toml)))
        memo_path = base / "yaml-cache.txt"
        memo = YamlMemo(memo_path)
        for path in resources.yaml_files(directory):
            yamlio.load(path, plain=True, memo=memo)  # what generate's reading remembers
        memo.save()
        size = sum(len(toml) for toml in tomls) / count
        ways: dict[str, Callable[[], object]] = {
            "floor (read and decode)": lambda: floor(directory),
            "ruamel safe (before)": lambda: ruamel_reading(directory),
            "libyaml, no memo": lambda: resources.collect_policies(directory),
            "with generate's memo": lambda: resources.collect_policies(
                directory, YamlMemo(memo_path)
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(rounds):  # taking turns
            for name, call in ways.items():
                times[name].append(timed(call))
        expected = len(resources.collect_policies(directory))
        assert expected == len(resources.collect_policies(directory, YamlMemo(memo_path)))
        assert expected == len(ruamel_reading(directory)) == count
    print(f"{count} workloads, {label} ({size / 1000:.1f} KB initdata), {rounds} rounds:")
    for name, seconds in times.items():
        runs = ", ".join(f"{value:.2f}" for value in seconds)
        print(f"  {name:26} best {min(seconds):6.2f} s  ({runs})")
    print(f"  goal for the whole `set`: {GOAL_S:.1f} s")


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 10_000
    rounds = int(argv[1]) if len(argv) > 1 else 2
    run(count, rounds, small_policy, "300-byte policies")
    # A tenth as many: ruamel takes 14 ms a file of these, 2 minutes a round at 10 000.
    run(max(count // 10, 1), rounds, generated_policy, "generated-size policies")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
