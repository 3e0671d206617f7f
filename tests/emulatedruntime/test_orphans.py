"""Two nodes' containerds on one machine sharing the runtime's state, as two test clusters do.

Node A goes as `cluster.sh down` took a cluster down before it ended its pods' TEE servers:
containerd stopped, then its shims killed. No `delete` reaches the runtime, so A's sandbox keeps
its TEE server and directory. The next sandbox created on node B reaps it (its owner, A's shim,
is gone) and leaves B's running pod alone. While containerd runs, a killed shim is containerd's to
clean up (it runs the shim's `delete`, which reaches the runtime): not what is tested here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contrast.api import teeendpoint as endpoint
from contrast.emulatedruntime.node import NodeState, Owner
from tests.emulatedruntime.node import Node, app_pod, stop_servers

# The runc root of containerd's runc shim for namespace k8s.io (go-runc's default).
RUNC_ROOT = "/run/containerd/runc/k8s.io"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, Node]]:
    first = Node(tmp_path_factory.mktemp("node-a"))
    second = Node(tmp_path_factory.mktemp("node-b"))
    second.state = first.state  # one machine: one /run/contrast-emulated-runtime
    started: list[Node] = []
    try:
        for node in (first, second):
            node.start()
            started.append(node)
        yield first, second
    finally:
        for node in started:
            node.stop()
        stop_servers(NodeState(first.state))  # an orphan a failed test left running


def _ended(pid: int) -> bool:
    return Owner.of(pid) is None


def _wait(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 15
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_sandbox_whose_shim_was_killed_is_reaped_by_the_next_sandbox(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    sandboxes = NodeState(a.state)
    gone_pod, live_pod, next_pod = (app_pod(a.roots, name) for name in ("gone", "live", "next"))
    for node, pod in ((a, gone_pod), (b, live_pod)):
        started = node.run(pod.sandbox_id, node.sandbox_spec(pod))
        assert started.returncode == 0, started.stderr
    gone = sandboxes.sandbox(gone_pod.sandbox_id)
    live = sandboxes.sandbox(live_pod.sandbox_id)
    gone_server, live_server = gone.server_pid(), live.server_pid()
    assert gone_server is not None
    assert live_server is not None
    shim = gone.owner()
    assert shim is not None
    # The recorded owner is the shim that ran the sandbox's runc create, of node A's containerd.
    command = Path(f"/proc/{shim.pid}/cmdline").read_bytes()
    assert b"containerd-shim-runc-v2" in command
    assert os.fsencode(str(a.socket)) in command

    # Node A taken down as cluster.sh down did: containerd first, then its shims killed.
    assert a.process is not None
    a.process.terminate()
    a.process.wait(timeout=30)
    os.kill(shim.pid, signal.SIGKILL)
    try:
        _wait("A's shim still runs", lambda: not shim.runs())
        time.sleep(0.5)
        assert gone.server_pid() == gone_server  # no delete came: its TEE server runs on
        assert gone.exists()

        started = b.run(next_pod.sandbox_id, b.sandbox_spec(next_pod))
        assert started.returncode == 0, started.stderr
        _wait(f"the orphan's TEE server {gone_server} still runs", lambda: _ended(gone_server))
        assert not gone.directory.exists()
        assert sandboxes.sandbox_of(gone_pod.sandbox_id) is None
        # Node B's pods keep theirs: the running one answers with its own initdata.
        assert live.server_pid() == live_server
        evidence = endpoint.request_evidence(live.tee_socket, bytes(64))
        assert evidence.report[0xC0:0xE0].hex() == live_pod.policy.policy_hash
        assert sandboxes.sandbox(next_pod.sandbox_id).server_pid() is not None
    finally:
        # A's pause container outlives its shim: end it with runc itself (not the runtime).
        subprocess.run(
            ["runc", "--root", RUNC_ROOT, "delete", "--force", gone_pod.sandbox_id],
            capture_output=True, check=False,
        )  # fmt: skip
