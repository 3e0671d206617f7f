"""`contrast set` through the CLI on a 10 000-workload workspace (issue 29's goal: ≤ 3 s).

The workspace is the local demo's (`contrast.local.workspace.write_workspace`: one Pod file per
workload, its initdata annotation a ~300-byte policy) with N workloads (default 10 000), and a
real Coordinator on loopback (emulated SNP, file-system history) runs in a process of its own.
`contrast set` runs as a process, taking turns between this tree and a tree given with
`--before DIR` (a `src` directory of another commit, for an A/B run), each `set` an update of the
same manifest; this tree also with generate's YAML memo in the workspace (`yaml-cache.txt`,
made here as generate's reading makes it), as after `contrast generate`. The floor is the
interpreter starting and doing nothing (`python -c pass`).

Run: `.venv/bin/python bench/bench_set_cli.py [WORKLOADS] [ROUNDS] [--before SRC]`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's own helpers

from abrounds import BEFORE, THIS_TREE, taking_turns, trees

YAML_CACHE = "yaml-cache.txt"  # contrast.kuberesource.yamlmemo.FILE
GOAL_S = 3.0


def serve(state: Path, tee: Path, role_name: str) -> None:
    """The Coordinator, in this process: prints its user API port, runs until stdin closes."""
    from contrast.atls.identity import TlsIdentity  # noqa: PLC0415 - the server process only
    from contrast.atls.issuers import EmulatedSnpIssuer  # noqa: PLC0415
    from contrast.attestation.emulated.snp import EmulatedSnp  # noqa: PLC0415
    from contrast.coordinator.core import Coordinator, utc_now  # noqa: PLC0415
    from contrast.coordinator.server import CoordinatorServer, Ports  # noqa: PLC0415
    from contrast.history.history import History  # noqa: PLC0415
    from contrast.history.store import FileSystemStore  # noqa: PLC0415
    from contrast.local.workspace import DemoWorkload  # noqa: PLC0415
    from contrast.manifest.verifier import workload_verifier  # noqa: PLC0415

    coordinator = Coordinator(History(FileSystemStore(state)), verifier_for=workload_verifier)
    issuer = EmulatedSnpIssuer(
        EmulatedSnp(tee), DemoWorkload(role_name, role="coordinator").policy_hash
    )
    server = CoordinatorServer(
        coordinator,
        issuer,
        TlsIdentity.generate(now=utc_now()),
        host="127.0.0.1",
        ports=Ports(0, 0, 0),
    )
    server.start()
    print(server.ports.user_api, flush=True)
    sys.stdin.read()
    server.stop(grace=0)


def remember(workspace: Path, memo: Path) -> None:
    """Generate's memo of the resources, as `generate` leaves it in the workspace."""
    from contrast.client.resources import yaml_files  # noqa: PLC0415
    from contrast.kuberesource import yamlio  # noqa: PLC0415
    from contrast.kuberesource.yamlmemo import YamlMemo  # noqa: PLC0415

    remembered = YamlMemo(memo)
    for path in yaml_files(workspace / "resources"):
        yamlio.load(path, plain=True, memo=remembered)
    remembered.save()


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed: {done.stderr.strip()}")
    return elapsed


def floor() -> float:
    """`python -c pass`, the floor of a command: the interpreter starting and doing nothing."""
    return timed([sys.executable, "-c", "pass"], dict(os.environ))


def run_set(command: list[str], src: Path) -> float:
    """`command` (contrast set) as a process with `src` on its PYTHONPATH; its seconds."""
    return timed(command, dict(os.environ, PYTHONPATH=str(src)))


@contextlib.contextmanager
def serving(base: Path) -> Iterator[list[str]]:
    """A Coordinator in a process of its own (`serve` on BASE/state, BASE/tee) for the block;
    yields the `contrast set` command to it, on BASE/workspace."""
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            str(base / "state"),
            str(base / "tee"),
            "coordinator",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        workspace = base / "workspace"
        yield [
            sys.executable, "-m", "contrast.cli.main", "set", "-c", f"127.0.0.1:{port}",
            "--workspace-dir", str(workspace), str(workspace / "resources"),
        ]  # fmt: skip
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)


def print_best(times: dict[str, list[float]]) -> None:
    for name, seconds in times.items():
        runs = ", ".join(f"{value:.2f}" for value in seconds)
        print(f"  {name:16} best {min(seconds):6.2f} s  ({runs})")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        serve(Path(argv[1]), Path(argv[2]), argv[3])
        return 0
    sources = trees(argv)
    count = int(argv[0]) if argv else 10_000
    rounds = int(argv[1]) if len(argv) > 1 else 3
    from contrast.atls.issuers import TeeKind  # noqa: PLC0415
    from contrast.attestation.emulated.snp import EmulatedSnp  # noqa: PLC0415
    from contrast.local.workspace import (  # noqa: PLC0415
        DemoWorkload,
        emulated_reference_values,
        write_workspace,
    )

    with tempfile.TemporaryDirectory(dir="/tmp") as temporary:
        base = Path(temporary)
        EmulatedSnp(base / "tee")
        workloads = [DemoWorkload("coordinator", role="coordinator")]
        workloads += [DemoWorkload(f"w{index}") for index in range(count - 1)]
        values = emulated_reference_values(TeeKind.EMULATED_SNP, base / "tee")
        workspace = base / "workspace"
        write_workspace(workspace, values, workloads)
        memo, aside = workspace / YAML_CACHE, base / YAML_CACHE
        remember(workspace, memo)
        memo.rename(aside)

        def with_memo(command: list[str]) -> float:
            """This tree's `set` with generate's memo in the workspace, as after generate."""
            aside.rename(memo)
            try:
                return run_set(command, sources[THIS_TREE])
            finally:
                memo.rename(aside)

        with serving(base) as command:
            measures: dict[str, Callable[[], float]] = {
                "python -c pass": floor,
                THIS_TREE: partial(run_set, command, sources[THIS_TREE]),
                "this tree, memo": partial(with_memo, command),
            }
            if BEFORE in sources:
                measures[BEFORE] = partial(run_set, command, sources[BEFORE])
            times = taking_turns(rounds, measures)
    print(f"contrast set through the CLI, {count} workloads, {rounds} rounds (goal {GOAL_S} s):")
    print_best(times)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
