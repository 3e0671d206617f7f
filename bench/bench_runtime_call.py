"""One runc call of the emulated runtime that is an agent request, as a process, per tree.

Each `create` (of a pod's containers after its sandbox), `exec` and `delete` is a new
interpreter: it imports the runtime, then has the request judged by the pod's policy. Before the
pod's TEE server kept the policy compiled (`emulatedruntime/evaluator.py`), each call loaded the
policy itself; now it asks the server. This bench runs that part of a call as a process, the
trees taking turns call by call: this tree's `src` (asking a `PolicyServer` this process runs
for the pod) and, with `--before SRC`, another commit's (`_load_policy` then `evaluate`), on a
policy `generate` writes for a one-container pod, with ExecProcessRequest for `sh`. The floor is
`python -c pass` in the same turns. The figure is CPU time: the child's, plus this process's
during the call (the server's threads, for this tree), and wall time beside it.

Run: `.venv/bin/python bench/bench_runtime_call.py [ROUNDS] [--before SRC]` (default 15).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the tests' pod and policy
sys.path.insert(0, str(REPO / "bench"))  # the bench's own helpers

from abrounds import spread, taking_turns, trees  # noqa: E402

CALL = """
import sys
from pathlib import Path
from contrast.emulatedruntime import agentrequests, wrapper
from contrast.emulatedruntime.node import Sandbox
sandbox = Sandbox(Path(sys.argv[1]))
process = {"args": ["sh"], "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}}
request = agentrequests.exec_process_request(process, sys.argv[2], "0" * 32)
with sandbox.locked():
    state = sandbox.load_state()
    if hasattr(wrapper, "_evaluate"):
        decision, _ = wrapper._evaluate(sandbox, state, "ExecProcessRequest", request)
    else:
        decision = wrapper._load_policy(sandbox.initdata(), state).evaluate(
            "ExecProcessRequest", request
        )
print(decision.allowed)
"""


def cpu_of_children_and_self() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    return children.ru_utime + children.ru_stime + own.ru_utime + own.ru_stime


def run(src: Path, code: list[str]) -> tuple[float, float]:
    cpu, wall = cpu_of_children_and_self(), time.perf_counter()
    subprocess.run(
        [sys.executable, *code],
        env={"PYTHONPATH": str(src), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return (cpu_of_children_and_self() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3


def main() -> None:
    from tests.emulatedruntime.node import app_pod  # noqa: PLC0415

    from contrast.emulatedruntime.evaluator import PolicyServer  # noqa: PLC0415
    from contrast.emulatedruntime.node import NodeState  # noqa: PLC0415
    from contrast.policy import initdata  # noqa: PLC0415

    args = sys.argv[1:]
    sources = trees(args)
    rounds = int(args[0]) if args else 15
    with tempfile.TemporaryDirectory() as temporary:
        pod = app_pod(Path(temporary))
        toml = initdata.decode_annotation(pod.annotation)
        sandbox = NodeState(Path(temporary) / "state").new_sandbox("a" * 64, toml)
        policy = initdata.Initdata.from_toml(toml).policy
        assert policy is not None
        PolicyServer(policy).start(sandbox.directory)
        call = ["-c", CALL, str(sandbox.directory), "c1"]
        run(REPO / "src", call)  # the server compiled, caches warm
        results = taking_turns(rounds, {
            "floor": partial(run, REPO / "src", ["-c", "pass"]),
            **{name: partial(run, src, call) for name, src in sources.items()},
        })  # fmt: skip
    print(f"{rounds} rounds, taking turns; policy of a one-container pod ({len(policy)} bytes)")
    floor = statistics.median(cpu for cpu, _ in results["floor"])
    for name in [*sources, "floor"]:
        cpu = [c for c, _ in results[name]]
        wall = [w for _, w in results[name]]
        print(
            f"{name:10} CPU {spread(cpu, 1)} ms,"
            f" {statistics.median(cpu) / floor:5.2f}x python -c pass; wall {spread(wall, 1)} ms"
        )


if __name__ == "__main__":
    main()
