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

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        serve(Path(argv[1]), Path(argv[2]), argv[3])
        return 0
    before = None
    if "--before" in argv:
        at = argv.index("--before")
        before = argv[at + 1]
        del argv[at : at + 2]
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
            command = [sys.executable, "-m", "contrast.cli.main", "set", "-c", f"127.0.0.1:{port}"]
            command += [
                "--workspace-dir",
                str(base / "workspace"),
                str(base / "workspace" / "resources"),
            ]
            memo, aside = workspace / YAML_CACHE, base / YAML_CACHE
            remember(workspace, memo)
            memo.rename(aside)
            # name → (the `src` it runs, whether generate's memo is in the workspace)
            trees = {
                "this tree": (str(REPO / "src"), False),
                "this tree, memo": (str(REPO / "src"), True),
            }
            if before is not None:
                trees["before"] = (before, False)
            times: dict[str, list[float]] = {name: [] for name in ("python -c pass", *trees)}
            for _ in range(rounds):  # taking turns
                times["python -c pass"].append(
                    timed([sys.executable, "-c", "pass"], dict(os.environ))
                )
                for name, (src, with_memo) in trees.items():
                    if with_memo:
                        aside.rename(memo)
                    env = dict(os.environ, PYTHONPATH=src)
                    times[name].append(timed(command, env))
                    if with_memo:
                        memo.rename(aside)
        finally:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(timeout=30)
    print(f"contrast set through the CLI, {count} workloads, {rounds} rounds (goal {GOAL_S} s):")
    for name, seconds in times.items():
        runs = ", ".join(f"{value:.2f}" for value in seconds)
        print(f"  {name:16} best {min(seconds):6.2f} s  ({runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
