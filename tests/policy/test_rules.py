"""Our rules.rego with the evaluator: defaults for every query, toggles, state, explanations."""

from __future__ import annotations

from typing import Any

import pytest

from contrast.images.model import ImageConfig, ImageFacts
from contrast.kuberesource.workloads import Workload
from contrast.policy.engine import AgentPolicy
from contrast.policy.generate import PolicyGenerator, default_rules
from contrast.policy.requests import request_names
from contrast.policy.settings import Settings, default_settings

IMAGE = "registry.example/app@sha256:" + "cd" * 32


def generated_policy(settings: Settings | None = None) -> str:
    settings = settings or default_settings()
    pause = settings.pause_image
    images = {
        pause: ImageFacts(pause, "", ImageConfig(user="65535:65535", entrypoint=("/pause",))),
        IMAGE: ImageFacts(IMAGE, "", ImageConfig(entrypoint=("/app",))),
    }
    workload = Workload(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "app"},
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": IMAGE,
                        "livenessProbe": {"exec": {"command": ["check"]}},
                    }
                ]
            },
        }
    )
    return PolicyGenerator(default_rules(), settings).generate(workload, images).policy_text


@pytest.fixture(scope="module")
def policy_text() -> str:
    return generated_policy()


def test_every_query_has_a_value(policy_text: str) -> None:
    policy = AgentPolicy(policy_text)
    missing = [name for name in request_names() if policy.query(name, {}) is None]
    assert missing == []
    assert policy.allows_failing_requests is False


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("ReadStreamRequest", True),
        ("WriteStreamRequest", False),
        ("CloseStdinRequest", False),
        ("SetPolicyRequest", False),
        ("StartContainerRequest", True),
        ("UpdateContainerRequest", False),
    ],
)
def test_simple_requests(policy_text: str, name: str, allowed: bool) -> None:
    assert AgentPolicy(policy_text).evaluate(name, {}).allowed is allowed


def test_read_stream_follows_the_settings() -> None:
    document = dict(default_settings().document)
    document["request_defaults"] = {**document["request_defaults"], "ReadStreamRequest": False}
    text = generated_policy(Settings(document))
    assert AgentPolicy(text).evaluate("ReadStreamRequest", {}).allowed is False


def test_exec_needs_a_container_the_policy_created(policy_text: str) -> None:
    policy = AgentPolicy(policy_text)
    decision = policy.evaluate(
        "ExecProcessRequest", {"container_id": "c1", "process": {"Args": ["check"], "Cwd": "/"}}
    )
    assert not decision.allowed
    assert any("not one this policy created" in line for line in decision.prints)


def test_remove_of_an_unknown_container_changes_nothing(policy_text: str) -> None:
    decision = AgentPolicy(policy_text).evaluate("RemoveContainerRequest", {"container_id": "x"})
    assert decision.allowed
    assert decision.ops == ()


def test_create_container_denial_names_the_failed_checks(policy_text: str) -> None:
    request: dict[str, Any] = {
        "container_id": "c1",
        "OCI": {
            "Version": "9.9.9",
            "Annotations": {"io.kubernetes.cri.sandbox-name": "other"},
            "Process": {"Args": ["/evil"], "Cwd": "/"},
            "Root": {"Path": "/run/kata-containers/c1/rootfs"},
            "Linux": {"Resources": {"Devices": []}},
        },
    }
    decision = AgentPolicy(policy_text).evaluate("CreateContainerRequest", request)
    assert not decision.allowed
    text = "\n".join(decision.prints)
    assert "OCI.Version expected 1.1.0 got 9.9.9" in text
    assert "Process.Args" in text
    assert "io.kubernetes.cri.sandbox-name" in text


def test_create_container_with_hooks_is_refused_before_matching(policy_text: str) -> None:
    request = {"OCI": {"Hooks": {}, "Linux": {"Resources": {"Devices": []}}}}
    decision = AgentPolicy(policy_text).evaluate("CreateContainerRequest", request)
    assert not decision.allowed
    assert any("OCI.Hooks must be null" in line for line in decision.prints)
