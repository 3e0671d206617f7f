"""The engine answers, keeps state and fails exactly where the Kata agent does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrast.policy.engine import (
    AgentPolicy,
    PolicyEvaluationError,
    PolicyLoadError,
    lenient_policy_text,
)
from contrast.policy.json_patch import JsonPatchError, apply_patch
from contrast.policy.requests import RequestError

KATA = Path(__file__).parents[2].parent / "shared" / "testdata" / "kata-policy"

HEADER = """package agent_policy

import future.keywords.if
import future.keywords.in
import future.keywords.every

"""

STATEFUL = (
    HEADER
    + """
default CreateContainerRequest := {"allowed": false}
default RemoveContainerRequest := false
default StartContainerRequest := true
default UpdateContainerRequest := false

CreateContainerRequest := {"allowed": true, "ops": ops} if {
    not input.container_id in object.keys(data.pstate)
    ops := [{"op": "add", "path": concat("", ["/pstate/", input.container_id]), "value": 0}]
}

CreateContainerRequest := {"allowed": true, "ops": null} if {
    data.pstate[input.container_id] == 0
}

RemoveContainerRequest := {"allowed": true, "ops": ops} if {
    ops := [{"op": "remove", "path": concat("", ["/pstate/", input.container_id])}]
}

UpdateContainerRequest := {
    "allowed": false,
    "ops": [{"op": "add", "path": "/pstate/u", "value": 1}],
}
"""
)


def test_bool_answers() -> None:
    policy = AgentPolicy(STATEFUL)
    started = policy.evaluate("StartContainerRequest", {"container_id": "a"})
    assert started.allowed
    assert started.ops == ()
    assert started.value is True
    assert started.input == {"container_id": "a"}


def test_object_answers_apply_ops_and_keep_state_across_requests() -> None:
    policy = AgentPolicy(STATEFUL)
    first = policy.evaluate("CreateContainerRequest", {"container_id": "c1"})
    assert first.allowed
    assert first.ops == ({"op": "add", "path": "/pstate/c1", "value": 0},)
    assert policy.state == {"c1": 0}
    again = policy.evaluate("CreateContainerRequest", {"container_id": "c1"})
    assert again.allowed
    assert again.ops == ()
    assert policy.state == {"c1": 0}
    removed = policy.evaluate("RemoveContainerRequest", {"container_id": "c1"})
    assert removed.allowed
    assert policy.state == {}


def test_state_is_a_copy() -> None:
    policy = AgentPolicy(STATEFUL)
    policy.evaluate("CreateContainerRequest", {"container_id": "c1"})
    policy.state["c1"] = 99
    assert policy.state == {"c1": 0}


def test_a_denial_never_changes_state() -> None:
    policy = AgentPolicy(STATEFUL)
    denied = policy.evaluate("UpdateContainerRequest", {})
    assert not denied.allowed
    assert denied.ops == ()
    assert policy.state == {}


def test_failing_remove_patch_is_an_error_and_leaves_state_unchanged() -> None:
    policy = AgentPolicy(STATEFUL)
    policy.evaluate("CreateContainerRequest", {"container_id": "kept"})
    with pytest.raises(PolicyEvaluationError, match=r"RemoveContainerRequest.*'absent'"):
        policy.evaluate("RemoveContainerRequest", {"container_id": "absent"})
    assert policy.state == {"kept": 0}
    # The engine's data is unchanged too: a repeated create still sees the stored value.
    assert policy.evaluate("CreateContainerRequest", {"container_id": "kept"}).ops == ()


def test_exactly_one_result_is_required() -> None:
    policy = AgentPolicy(HEADER + "default StartContainerRequest := true\n")
    with pytest.raises(PolicyEvaluationError, match="0 results") as raised:
        policy.evaluate("WaitProcessRequest", {})
    assert "default" in raised.value.explain()


def test_other_answer_types_are_errors() -> None:
    policy = AgentPolicy(
        HEADER
        + 'WaitProcessRequest := "yes"\n'
        + 'SignalProcessRequest := {"allowed": "true"}\n'
        + 'StartContainerRequest := {"allowed": true, "ops": "add"}\n'
    )
    for kind in ("WaitProcessRequest", "SignalProcessRequest", "StartContainerRequest"):
        with pytest.raises(PolicyEvaluationError, match=kind):
            policy.evaluate(kind, {})


def test_allow_requests_failing_policy_turns_denials_and_missing_results_into_allow() -> None:
    policy = AgentPolicy(
        HEADER + "AllowRequestsFailingPolicy := true\ndefault ExecProcessRequest := false\n"
    )
    assert policy.allows_failing_requests
    denied = policy.evaluate("ExecProcessRequest", {})
    assert denied.allowed
    assert denied.overridden
    assert denied.value is False
    missing = policy.evaluate("WaitProcessRequest", {})
    assert missing.allowed
    assert missing.overridden
    assert missing.value is None


def test_allow_requests_failing_policy_is_false_unless_true() -> None:
    assert not AgentPolicy(HEADER + "x := 1\n").allows_failing_requests
    erroring = AgentPolicy(HEADER + 'AllowRequestsFailingPolicy := "true"\n')
    assert not erroring.allows_failing_requests
    policy = AgentPolicy(HEADER + "default ExecProcessRequest := false\n")
    decision = policy.evaluate("ExecProcessRequest", {})
    assert not decision.allowed
    assert not decision.overridden


def test_prints_are_gathered_per_request() -> None:
    policy = AgentPolicy(
        HEADER
        + "default ExecProcessRequest := false\n"
        + 'ExecProcessRequest if {\n    print("checking", input.container_id)\n    false\n}\n'
    )
    decision = policy.evaluate("ExecProcessRequest", {"container_id": "c"})
    assert not decision.allowed
    assert len(decision.prints) == 1
    assert decision.prints[0].endswith("checking c")
    assert "checking c" in decision.agent_message
    assert policy.evaluate("ExecProcessRequest", {"container_id": "d"}).prints[0].endswith("d")


def test_the_package_must_be_agent_policy() -> None:
    with pytest.raises(PolicyLoadError, match="package other") as raised:
        AgentPolicy("package other\n\ndefault x := true\n")
    assert "agent_policy" in raised.value.explain()


def test_syntax_errors_name_the_location_on_one_line() -> None:
    with pytest.raises(PolicyLoadError) as raised:
        AgentPolicy(HEADER + "x := \n")
    assert "agent_policy:8" in str(raised.value)
    assert "\n" not in str(raised.value)
    assert "backtrace" not in str(raised.value).lower()


def test_length_limits_are_the_agents() -> None:
    long_ok = HEADER + 'x := "' + "a" * 60_000 + '"\n'
    assert AgentPolicy(long_ok).query("x") == "a" * 60_000
    with pytest.raises(PolicyLoadError):
        AgentPolicy(HEADER + 'x := "' + "a" * (64 * 1024) + '"\n')
    with pytest.raises(PolicyLoadError):
        AgentPolicy(HEADER + "x := 1\n" * 200_001)


def test_unknown_request_names_are_refused() -> None:
    with pytest.raises(RequestError, match="Bogus"):
        AgentPolicy(STATEFUL).evaluate("Bogus", {})


def test_query_reads_rules_like_policy_data() -> None:
    policy = AgentPolicy(HEADER + 'policy_data := {"containers": [{"OCI": {}}]}\n')
    assert policy.query("policy_data") == {"containers": [{"OCI": {}}]}
    assert policy.query("absent") is None


LENIENT = (
    HEADER
    + """
default CreateContainerRequest := false

is_ip(value) if {
    parts := split(value, ".")
    count(parts) == 4
    every part in parts {
        n := to_number(part)
        n >= 0
        n <= 255
    }
}

# to_number( in a comment and "to_number(" in a string stay as written
CreateContainerRequest if {
    every env in input.OCI.Process.Env {
        value := split(env, "=")[1]
        not is_ip(value)
    }
    "to_number(" != ""
}
"""
)


def test_failing_to_number_makes_only_that_expression_undefined() -> None:
    policy = AgentPolicy(LENIENT)
    service_link = {"OCI": {"Process": {"Env": ["KUBERNETES_PORT_443_TCP=tcp://10.0.0.1:443"]}}}
    assert policy.evaluate("CreateContainerRequest", service_link).allowed
    an_ip = {"OCI": {"Process": {"Env": ["POD_IP=10.0.0.1"]}}}
    assert not policy.evaluate("CreateContainerRequest", an_ip).allowed


def test_lenient_rewrite_keeps_strings_comments_and_line_lengths() -> None:
    text = 'x := to_number("1") # to_number(2)\ny := "to_number(3)"\nz := a.to_number(4)\n'
    rewritten = lenient_policy_text(text)
    assert rewritten == (
        'x := ctr_tonum("1") # to_number(2)\ny := "to_number(3)"\nz := a.to_number(4)\n'
    )
    assert [len(line) for line in rewritten.splitlines()] == [
        len(line) for line in text.splitlines()
    ]


def test_strict_regorus_would_have_raised() -> None:
    # The reason for the rewrite: the same policy, unguarded, errors in the Python wheel.
    import regorus  # type: ignore[import-untyped]

    engine = regorus.Engine()
    engine.add_policy("agent_policy", LENIENT)
    engine.set_input({"OCI": {"Process": {"Env": ["A=tcp://10.0.0.1:443"]}}})
    with pytest.raises(RuntimeError, match="could not parse"):
        engine.eval_query("data.agent_policy.CreateContainerRequest")


def test_patches_are_all_or_nothing() -> None:
    document = {"pstate": {"a": 1}}
    patched = apply_patch(
        document,
        [
            {"op": "add", "path": "/pstate/b", "value": [1]},
            {"op": "add", "path": "/pstate/b/-", "value": 2},
            {"op": "replace", "path": "/pstate/a", "value": 3},
            {"op": "test", "path": "/pstate/b", "value": [1, 2]},
            {"op": "remove", "path": "/pstate/b/0"},
        ],
    )
    assert patched == {"pstate": {"a": 3, "b": [2]}}
    assert document == {"pstate": {"a": 1}}
    with pytest.raises(JsonPatchError, match="operation 1"):
        apply_patch(
            document, [{"op": "add", "path": "/x", "value": 1}, {"op": "remove", "path": "/y"}]
        )
    with pytest.raises(JsonPatchError):
        apply_patch(document, [{"op": "test", "path": "/pstate/a", "value": True}])
    assert apply_patch({"a~b/": 0}, [{"op": "remove", "path": "/a~0b~1"}]) == {}


# A small hand-written rule set for the Kata cases that need no container policy.
NETWORK_AND_FILES = (
    HEADER
    + r"""
default CopyFileRequest := false
default CreateSandboxRequest := false
default UpdateRoutesRequest := false
default UpdateInterfaceRequest := false
default AddARPNeighborsRequest := false

sfprefix := "^/run/kata-containers/shared/containers/(watchable/)?[a-z0-9]{64}-[a-z0-9]{16}-"

CopyFileRequest if {
    regex.match(sfprefix, input.path)
    not ".." in split(input.path, "/")
    input.file_type in ["Regular", "Directory"]
}

CopyFileRequest if {
    regex.match(concat("", [sfprefix, "[^/]+/"]), input.path)
    not ".." in split(input.path, "/")
    input.file_type == "Symlink"
    not startswith(input.symlink_target, "/")
    not ".." in split(input.symlink_target, "/")
}

CreateSandboxRequest if {
    input.sandbox_pidns == false
    count(input.kernel_modules) == 0
    input.guest_hook_path == ""
}

UpdateRoutesRequest if {
    every route in input.routes.Routes {
        route.device != "lo"
        not regex.match(`^(?:0{0,4}:){0,7}0{0,3}1$`, route.source)
        not regex.match(`^127\.`, route.source)
    }
}

UpdateInterfaceRequest if {
    input.interface.name != "lo"
    input.interface.hwAddr != "00:00:00:00:00:00"
    bits.and(input.interface.raw_flags, bits.negate(128)) == 0
}

AddARPNeighborsRequest if {
    every n in input.neighbors.ARPNeighbors {
        n.device != "lo"
        not regex.match(`^127\.`, n.toIPAddress.address)
        n.toIPAddress.mask == ""
        n.state in [2, 128]
        bits.and(n.flags, bits.negate(136)) == 0
    }
}
"""
)


@pytest.mark.parametrize(
    "test", ["copyfile", "updateroutes", "updateinterface", "addarpneighbors", "createsandbox"]
)
def test_kata_cases_without_containers(test: str) -> None:
    policy = AgentPolicy(NETWORK_AND_FILES)
    cases = json.loads((KATA / test / "testcases.json").read_text())
    verdicts = [policy.evaluate(case["kind"], case["request"]).allowed for case in cases]
    assert verdicts == [case["allowed"] for case in cases]
