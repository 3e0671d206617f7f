"""`contrast set` through the CLI on a 10 000-workload workspace (issue 29's goal: ≤ 3 s).

The workspace is the local demo's (`contrast.local.workspace.write_workspace`: one Pod file per
workload, its initdata annotation a ~300-byte policy) with N workloads (default 10 000), and a
real Coordinator on loopback (emulated SNP, file-system history) runs in a process of its own.
With `--real-size`, each workload's initdata is the size `contrast generate` writes (the rules
and the pod's data, ~54 KB, `bench_history_workloads.GeneratedWorkload`): 10 000 of them are
~545 MB of documents in ~170 MB of YAML, which is what `set` reads, checks and sends in practice.
`contrast set` runs as a process, taking turns between this tree and a tree given with
`--before SRC` (a `src` directory of another commit, for an A/B run), each `set` an update of the
same manifest; this tree also with generate's YAML memo and policy cache in the workspace
(`yaml-cache.txt`, made here as generate's reading makes it; `policy-cache.json`, the policy hash
of each annotation), as after `contrast generate` (with `--real-size` every tree runs with them,
since that is how `set` follows `generate`). Each run's wall time
and the CPU time of the `set` process (user + system, from `wait4`) are printed; the floor is the
interpreter starting and doing nothing (`python -c pass`).

Run: `.venv/bin/python bench/bench_set_cli.py [WORKLOADS] [ROUNDS] [--real-size] [--before SRC]`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's own helpers

from abrounds import BEFORE, THIS_TREE, taking_turns, trees

if TYPE_CHECKING:
    from contrast.local.workspace import DemoWorkload

YAML_CACHE = "yaml-cache.txt"  # contrast.kuberesource.yamlmemo.FILE
POLICY_CACHE = "policy-cache.json"  # contrast.policy.cache.FILE
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


class Timing(NamedTuple):
    wall: float
    cpu: float  # the process's user + system time


def remember_policies(workspace: Path, workloads: Sequence[DemoWorkload]) -> None:
    """generate's policy cache: the policy hash of each annotation it wrote, by the annotation's
    sha256 (its keys, made from generate's inputs, stand in as the workload's name here)."""
    from contrast.policy.cache import PolicyCache  # noqa: PLC0415
    from contrast.policy.initdata import encode_annotation  # noqa: PLC0415
    from contrast.policy.settings import default_settings  # noqa: PLC0415

    cache = PolicyCache(workspace / POLICY_CACHE, "", default_settings(), [])
    for workload in workloads:
        key = hashlib.sha256(workload.name.encode()).hexdigest()
        cache.store(key, encode_annotation(workload.initdata()), workload.policy_hash.hex())
    cache.save()


def timed(command: list[str], env: dict[str, str]) -> Timing:
    with tempfile.TemporaryFile() as errors:
        start = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            errors.seek(0)
            message = errors.read().decode(errors="replace").strip()
            raise SystemExit(f"{' '.join(command[:4])} failed: {message}")
    return Timing(elapsed, usage.ru_utime + usage.ru_stime)


def floor() -> Timing:
    """`python -c pass`, the floor of a command: the interpreter starting and doing nothing."""
    return timed([sys.executable, "-c", "pass"], dict(os.environ))


def run_set(command: list[str], src: Path) -> Timing:
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


def print_best(times: dict[str, list[Timing]]) -> None:
    for name, runs in times.items():
        walls = ", ".join(f"{run.wall:.2f}" for run in runs)
        cpus = ", ".join(f"{run.cpu:.2f}" for run in runs)
        best = min(run.wall for run in runs), min(run.cpu for run in runs)
        print(f"  {name:16} best wall {best[0]:6.2f} s ({walls})")
        print(f"  {'':16} best CPU  {best[1]:6.2f} s ({cpus})")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        serve(Path(argv[1]), Path(argv[2]), argv[3])
        return 0
    sources = trees(argv)
    real_size = "--real-size" in argv
    if real_size:
        argv.remove("--real-size")
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
        kind = DemoWorkload
        if real_size:
            from bench_history_workloads import GeneratedWorkload  # noqa: PLC0415

            kind = GeneratedWorkload
        workloads = [DemoWorkload("coordinator", role="coordinator")]
        workloads += [kind(f"w{index}") for index in range(count - 1)]
        values = emulated_reference_values(TeeKind.EMULATED_SNP, base / "tee")
        workspace = base / "workspace"
        write_workspace(workspace, values, workloads)
        remember(workspace, workspace / YAML_CACHE)
        remember_policies(workspace, workloads)
        generated = [workspace / YAML_CACHE, workspace / POLICY_CACHE]
        for path in generated:
            path.rename(base / path.name)

        def with_memo(command: list[str], src: Path) -> Timing:
            """`set` with generate's memo and policy cache in the workspace, as after generate."""
            for path in generated:
                (base / path.name).rename(path)
            try:
                return run_set(command, src)
            finally:
                for path in generated:
                    path.rename(base / path.name)

        with serving(base) as command:
            measures: dict[str, Callable[[], Timing]] = {"python -c pass": floor}
            if real_size:  # without the memo, reading 170 MB of YAML would be all one sees
                measures |= {
                    name: partial(with_memo, command, src) for name, src in sources.items()
                }
            else:
                measures[THIS_TREE] = partial(run_set, command, sources[THIS_TREE])
                measures["this tree, memo"] = partial(with_memo, command, sources[THIS_TREE])
                if BEFORE in sources:
                    measures[BEFORE] = partial(run_set, command, sources[BEFORE])
            times = taking_turns(rounds, measures)
    size = "generated-size (~54 KB)" if real_size else "~300-byte"
    print(
        f"contrast set through the CLI, {count} workloads of {size} policies, {rounds} rounds"
        f" (goal {GOAL_S} s; load average {os.getloadavg()[0]:.1f} at the end):"
    )
    print_best(times)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
