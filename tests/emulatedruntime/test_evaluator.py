"""The pod's compiled policy in its TEE server answers as a fresh load of the policy would."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from contrast.emulatedruntime import evaluator
from contrast.policy.engine import AgentPolicy

# Kata-style: an answer with ops that build state, a refusal with a print once the state has it.
POLICY = """package agent_policy

default AllowRequestsFailingPolicy := false

RemoveContainerRequest := {"allowed": true, "ops": [
    {"op": "add", "path": "/pstate/removed", "value": input.container_id},
]} if {
    not data.pstate.removed
} else := {"allowed": false} if {
    print("removed before:", data.pstate.removed)
}
"""


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    directory = tmp_path / ("s" * 64)  # a socket path longer than an address may be
    (directory / "tee").mkdir(parents=True)
    evaluator.PolicyServer(POLICY).start(directory)
    return directory


def fresh(data: dict[str, Any] | None, request: dict[str, Any]) -> tuple[Any, ...]:
    policy = AgentPolicy(POLICY, data)
    decision = policy.evaluate("RemoveContainerRequest", request)
    return decision.allowed, decision.kind, decision.prints, policy.data


def test_answers_are_a_fresh_loads_with_the_state_sent(sandbox: Path) -> None:
    first = evaluator.ask(sandbox, None, "RemoveContainerRequest", {"container_id": "c1"})
    assert first == fresh(None, {"container_id": "c1"})
    assert first is not None
    assert first[0] is True
    assert first[3] == {"pstate": {"removed": "c1"}}
    second = evaluator.ask(sandbox, first[3], "RemoveContainerRequest", {"container_id": "c2"})
    assert second == fresh(first[3], {"container_id": "c2"})
    assert second is not None
    assert second[0] is False
    assert any("removed before: c1" in line for line in second[2])
    # The server keeps no state of its own: the sandbox's records, sent with each call, do.
    again = evaluator.ask(sandbox, {"pstate": {}}, "RemoveContainerRequest", {"container_id": "c3"})
    assert again == fresh({"pstate": {}}, {"container_id": "c3"})
    assert again is not None
    assert again[0] is True


def test_the_socket_is_roots_alone_and_outside_the_pods_mount(sandbox: Path) -> None:
    socket_path = sandbox / evaluator.SOCKET_NAME
    mode = socket_path.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    assert list((sandbox / "tee").iterdir()) == []


def test_no_answer_without_a_server_or_a_policy_that_loads(tmp_path: Path) -> None:
    """The runc call then loads the policy itself and meets the same errors."""
    request = {"container_id": "c1"}
    assert evaluator.ask(tmp_path, None, "RemoveContainerRequest", request) is None
    evaluator.PolicyServer("package agent_policy\nthis is not rego").start(tmp_path)
    assert evaluator.ask(tmp_path, None, "RemoveContainerRequest", request) is None


def test_a_malformed_message_is_not_answered(sandbox: Path) -> None:
    server = evaluator.PolicyServer(POLICY)
    for message in ([], {"kind": 1}, {"kind": "RemoveContainerRequest", "request": []}):
        assert server.answer(message) == {"ok": False}
