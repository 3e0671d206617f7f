"""Explanations name the field that differs, never one that differs only by a placeholder.

The policy here is a Kata-style `policy_data` built from Kata's own allowed requests (with the
placeholders genpolicy writes: `$(root_path)`, `$(sfprefix)…$`, `$(bundle-id)`, `^…$`,
`$(default_caps)`, `$(host-name)`) and rules that deny everything, so the structural comparison
alone is under test.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from contrast.policy.engine import AgentPolicy
from contrast.policy.explain import Patterns, explain

KATA = Path(__file__).parents[2].parent / "shared" / "testdata" / "kata-policy"
SHARED = "/run/kata-containers/shared/containers/"


def _settings() -> dict[str, Any]:
    settings: dict[str, Any] = json.loads((KATA / "genpolicy-settings.json").read_text())
    return settings


def _cases(test: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads((KATA / test / "testcases.json").read_text())
    return cases


def policy_container(request: dict[str, Any], default_caps: list[str]) -> dict[str, Any]:
    """A genpolicy-like container entry that admits exactly this request."""
    oci = copy.deepcopy(request["OCI"])
    oci["Root"]["Path"] = "$(root_path)"
    for mount in oci["Mounts"]:
        if mount["source"].startswith(SHARED):
            # <shared dir>/<64-char bundle id>-<16-char suffix>-<name>
            name = mount["source"][len(SHARED) + 64 + 1 + 16 + 1 :]
            mount["source"] = f"$(sfprefix){re.escape(name)}$"
    annotations = oci["Annotations"]
    annotations["io.katacontainers.pkg.oci.bundle_path"] = (
        "/run/containerd/io.containerd.runtime.v2.task/k8s.io/$(bundle-id)"
    )
    annotations["io.kubernetes.cri.sandbox-id"] = "^[a-z0-9]{64}$"
    annotations["io.kubernetes.cri.sandbox-name"] = "^dummy$"
    if "io.kubernetes.cri.sandbox-log-directory" in annotations:
        annotations["io.kubernetes.cri.sandbox-log-directory"] = "^/var/log/pods/.*$"
        annotations["nerdctl/network-namespace"] = "^/var/run/netns/cni-[0-9a-f-]+$"
    capabilities = oci["Process"]["Capabilities"]
    for key, value in capabilities.items():
        if value == default_caps:
            capabilities[key] = ["$(default_caps)"]
    oci["Process"]["Env"] = [
        "HOSTNAME=$(host-name)" if env.startswith("HOSTNAME=") else env
        for env in oci["Process"]["Env"]
    ]
    return {
        "OCI": oci,
        "storages": [],
        "devices": [],
        "sandbox_pidns": False,
        "exec_commands": [["/bin/probe"]],
        "runtime_anno_patterns": {},
    }


@pytest.fixture(scope="module")
def policy_text() -> str:
    settings = _settings()
    common = {k: v for k, v in settings["common"].items() if k != "image_layer_verification"}
    runas = _cases("createcontainer/security_context/runas")
    containers = [
        policy_container(runas[0]["request"], common["default_caps"]),
        policy_container(runas[1]["request"], common["default_caps"]),
    ]
    sandbox = copy.deepcopy(settings["sandbox"])
    for storage in sandbox["storages"]:
        storage["shared"] = False
    policy_data = {
        "containers": containers,
        "common": common,
        "sandbox": sandbox,
        "request_defaults": settings["request_defaults"],
    }
    return (
        "package agent_policy\n\n"
        "default CreateContainerRequest := false\n"
        "default ExecProcessRequest := false\n"
        "default CreateSandboxRequest := false\n"
        "default CopyFileRequest := false\n"
        "default UpdateRoutesRequest := false\n"
        "default ReadStreamRequest := false\n"
        "\npolicy_data := " + json.dumps(policy_data, indent=2)
    )


def _explain(policy_text: str, kind: str, request: dict[str, Any], state: Any = None) -> list[str]:
    policy = AgentPolicy(policy_text)
    decision = policy.evaluate(kind, request)
    assert not decision.allowed
    explanation = explain(decision, policy.query("policy_data"), state or {})
    return [str(difference) for difference in explanation.differences]


def test_the_allowed_requests_match_their_entries_despite_placeholders(policy_text: str) -> None:
    runas = _cases("createcontainer/security_context/runas")
    assert _explain(policy_text, "CreateContainerRequest", runas[0]["request"]) == []
    workload = _explain(policy_text, "CreateContainerRequest", runas[1]["request"])
    # Kata allows the AppArmor profile the runtime sets; only the generic input checks remain.
    assert workload == []


def test_a_wrong_uid_is_the_only_difference(policy_text: str) -> None:
    runas = _cases("createcontainer/security_context/runas")
    assert _explain(policy_text, "CreateContainerRequest", runas[2]["request"]) == [
        "OCI.Process.User.UID: policy expects 65534, request has 0"
    ]
    assert _explain(policy_text, "CreateContainerRequest", runas[3]["request"]) == [
        "OCI.Process.User.GID: policy expects 65534, request has 0",
        "OCI.Process.User.AdditionalGids: policy expects [65534], request has [0]",
    ]


def test_closest_container_is_chosen_by_name_and_args_are_named(policy_text: str) -> None:
    request = copy.deepcopy(_cases("createcontainer/security_context/runas")[1]["request"])
    request["OCI"]["Process"]["Args"] = ["sh"]
    request["OCI"]["Process"]["Env"].append("SECRET=1")
    request["OCI"]["Mounts"].append(
        {"destination": "/host", "source": "/", "type_": "bind", "options": ["rbind"]}
    )
    policy = AgentPolicy(policy_text)
    decision = policy.evaluate("CreateContainerRequest", request)
    explanation = explain(decision, policy.query("policy_data"), {})
    assert explanation.compared_with == "policy container 1 (dummy)"
    lines = [str(d) for d in explanation.differences]
    assert lines == [
        'OCI.Process.Args: policy expects ["/usr/bin/entrypoint.sh"], request has ["sh"]',
        'OCI.Process.Env: "SECRET=1" is not allowed by the policy',
        'OCI.Mounts[/host]: unexpected mount (bind / options ["rbind"]); the policy has none there',
    ]
    assert "policy container 1 (dummy)" in "\n".join(explanation.lines())


def test_service_link_env_values_are_allowed_by_the_env_regexes(policy_text: str) -> None:
    request = copy.deepcopy(_cases("createcontainer/security_context/runas")[1]["request"])
    request["OCI"]["Process"]["Env"] += [
        "KUBERNETES_PORT_443_TCP=tcp://10.0.0.1:443",
        "KUBERNETES_SERVICE_HOST=10.0.0.1",
    ]
    request["OCI"]["Process"]["Cwd"] = "/tmp"
    assert _explain(policy_text, "CreateContainerRequest", request) == [
        'OCI.Process.Cwd: policy expects "/data", request has "/tmp"'
    ]


def test_capabilities_are_compared_as_sets_after_expanding_placeholders(policy_text: str) -> None:
    request = copy.deepcopy(_cases("createcontainer/security_context/runas")[0]["request"])
    request["OCI"]["Process"]["Capabilities"]["Bounding"] = [
        *reversed(request["OCI"]["Process"]["Capabilities"]["Bounding"][1:]),
        "CAP_SYS_ADMIN",
    ]
    assert _explain(policy_text, "CreateContainerRequest", request) == [
        "OCI.Process.Capabilities.Bounding: request adds SYS_ADMIN; request lacks CHOWN"
    ]


def test_exec_process_names_the_command_and_the_container(policy_text: str) -> None:
    differences = _explain(
        policy_text,
        "ExecProcessRequest",
        {"container_id": "c1", "process": {"Args": ["sh"], "Cwd": "/data"}},
        state={"c1": 1},
    )
    assert differences[0] == 'process.Args: policy allows [["/bin/probe"]], request has ["sh"]'
    unknown = _explain(policy_text, "ExecProcessRequest", {"container_id": "c9"}, state={})
    assert unknown == ['container_id: "c9" was not created under this policy (no state entry)']


def test_create_sandbox_copy_file_and_routes(policy_text: str) -> None:
    assert _explain(policy_text, "CreateSandboxRequest", {"sandbox_pidns": True}) == [
        "sandbox_pidns: policy expects false, request has true"
    ]
    assert _explain(policy_text, "CreateSandboxRequest", {}) == []
    copy_file = _explain(
        policy_text, "CopyFileRequest", {"path": "/etc/ssl/cert.pem", "file_type": "Regular"}
    )
    assert len(copy_file) == 1
    assert copy_file[0].startswith("path: matches none of the allowed prefixes")
    allowed_path = _cases("copyfile")[0]["request"]
    assert _explain(policy_text, "CopyFileRequest", allowed_path) == []
    routes = _explain(policy_text, "UpdateRoutesRequest", _cases("updateroutes")[3]["request"])
    assert routes == [
        'routes.Routes[0].source: "127.0.0.1" matches forbidden'
        ' "^127\\\\.(?:[0-9]{1,3}\\\\.){2}[0-9]{1,3}$"'
    ]
    assert _explain(policy_text, "ReadStreamRequest", {}) == [
        "request_defaults.ReadStreamRequest: is false: the policy does not allow this request"
    ]


def test_placeholders_expand_recursively() -> None:
    patterns = Patterns(_settings()["common"])
    shared = SHARED + "a" * 64 + "-0123456789abcdef-hosts"
    assert patterns.matches("$(sfprefix)hosts$", shared)
    assert not patterns.matches("$(sfprefix)hosts$", SHARED + "x/hosts")
    assert patterns.matches("$(root_path)", "/run/kata-containers/gid/rootfs")
    assert not patterns.matches("$(root_path)", "/somewhere/else/rootfs")
    assert patterns.matches("^dummy$", "dummy")
    assert not patterns.matches("/pause", "/bin/sh")
    assert patterns.capabilities(["$(default_caps)"]) >= {"CHOWN", "KILL"}


def test_without_policy_data_the_prints_are_all() -> None:
    policy = AgentPolicy(
        "package agent_policy\n\n"
        "default ExecProcessRequest := false\n"
        'ExecProcessRequest if {\n    print("exec is never allowed")\n    false\n}\n'
    )
    decision = policy.evaluate("ExecProcessRequest", {})
    explanation = explain(decision, policy.query("policy_data"), {})
    assert explanation.differences == ()
    assert any("exec is never allowed" in line for line in explanation.lines())
    assert any("no policy_data" in line for line in explanation.lines())


def test_vfio_devices_must_agree_with_cdi_annotations_and_masked_counts_as_readonly() -> None:
    vfio = {
        "id": "",
        "type_": "vfio-pci-gk",
        "vm_path": "",
        "container_path": "/dev/vfio/devices/vfio",
    }
    policy_data = {
        "containers": [
            {
                "OCI": {"Linux": {"ReadonlyPaths": ["/proc/asound"]}},
                "devices": [vfio, vfio],
                "runtime_anno_patterns": {
                    "^cdi\\.k8s\\.io/vfio[0-9]+$": "^nvidia\\.com/gpu=[0-9]+$"
                },
            }
        ],
        "common": {},
    }
    policy = AgentPolicy(
        "package agent_policy\n\ndefault CreateContainerRequest := false\n"
        "policy_data := " + json.dumps(policy_data)
    )
    request = {
        "devices": [{"container_path": f"/dev/vfio/devices/vfio{n}"} for n in (1, 2)],
        "OCI": {
            "Annotations": {
                "cdi.k8s.io/vfio1": "nvidia.com/gpu=0",
                "cdi.k8s.io/vfio3": "nvidia.com/gpu=1",
            },
            "Linux": {"MaskedPaths": ["/proc/asound"], "Resources": {}},
        },
    }
    decision = policy.evaluate("CreateContainerRequest", request)
    differences = [str(d) for d in explain(decision, policy.query("policy_data"), {}).differences]
    assert differences == [
        'devices: VFIO devices ["1", "2"] do not match'
        ' the cdi.k8s.io/vfio<N> annotations ["1", "3"]'
    ]
