"""Each platform's settings: the emulated ones expect what the node's containerd writes.

Debian's containerd 1.6.20, on which the emulated runtime runs, writes ociVersion 1.0.2-dev into
every spec and mounts a sandbox's resolv.conf `rbind,ro`; Kata's default settings expect 1.1.0
and nosuid,nodev,noexec too, which refused every default-generated pod there.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contrast.images.model import ImageConfig, ImageFacts
from contrast.kuberesource.workloads import Workload
from contrast.platforms import PLATFORMS
from contrast.policy.engine import AgentPolicy
from contrast.policy.generate import PolicyGenerator, default_rules
from contrast.policy.settings import Settings, default_settings, for_platform

IMAGE = "registry.example/app@sha256:" + "ef" * 32


@pytest.mark.parametrize("platform", [p.name for p in PLATFORMS])
def test_each_platform_gets_its_containerds_version(platform: str) -> None:
    expected = "1.0.2-dev" if platform.startswith("emulated-") else "1.1.0"
    settings = for_platform(default_settings(), platform)
    assert settings.get("kata_config", "oci_version") == expected
    # containerd 1.6 mounts the sandbox's resolv.conf rbind,ro (1.7 adds nosuid,nodev,noexec).
    resolv = settings.document["pause_container"]["Mounts"][1]
    assert resolv["destination"] == "/etc/resolv.conf"
    full = ["rbind", "ro", "nosuid", "nodev", "noexec"]
    assert resolv["options"] == (["rbind", "ro"] if platform.startswith("emulated-") else full)
    # Nothing else changes.
    document = copy.deepcopy(dict(settings.document))
    document["kata_config"]["oci_version"] = "1.1.0"
    document["pause_container"]["Mounts"][1]["options"] = full
    assert document == dict(default_settings().document)


def test_a_version_the_user_set_stays() -> None:
    document = copy.deepcopy(dict(default_settings().document))
    document["kata_config"]["oci_version"] = "1.2.0"
    document["pause_container"]["Mounts"][1]["options"] = ["rbind", "ro", "nosuid"]
    settings = Settings(document, "mine")
    emulated = for_platform(settings, "emulated-snp")
    assert emulated.get("kata_config", "oci_version") == "1.2.0"
    assert emulated.document["pause_container"]["Mounts"][1]["options"] == ["rbind", "ro", "nosuid"]


def _pod(runtime_class: str | None) -> Workload:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": IMAGE}]}
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    return Workload({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"}, "spec": spec})


def _create(version: str) -> dict[str, Any]:
    """A pause container's CreateContainer request, as far as the version check goes."""
    return {
        "container_id": "c1",
        "OCI": {
            "Version": version,
            "Annotations": {"io.kubernetes.cri.container-type": "sandbox"},
            "Process": {"Args": ["/pause"], "Cwd": "/"},
            "Root": {"Path": "/run/kata-containers/c1/rootfs"},
            "Linux": {"Resources": {"Devices": []}},
        },
    }


@pytest.mark.parametrize(
    ("runtime_class", "version"),
    [
        ("contrast-cc-emulated-snp", "1.0.2-dev"),
        ("contrast-cc-emulated-tdx-0123abcd", "1.0.2-dev"),  # a versioned handler
        ("contrast-cc-metal-qemu-snp", "1.1.0"),
        (None, "1.1.0"),
    ],
)
def test_a_default_generated_pod_expects_its_platforms_version(
    runtime_class: str | None, version: str
) -> None:
    settings = default_settings()
    pause = settings.pause_image
    images = {
        pause: ImageFacts(pause, "", ImageConfig(user="65535:65535", entrypoint=("/pause",))),
        IMAGE: ImageFacts(IMAGE, "", ImageConfig(entrypoint=("/app",))),
    }
    generated = PolicyGenerator(default_rules(), settings).generate(_pod(runtime_class), images)
    assert {c["OCI"]["Version"] for c in generated.policy_data["containers"]} == {version}
    other = "1.1.0" if version == "1.0.2-dev" else "1.0.2-dev"
    decision = AgentPolicy(generated.policy_text).evaluate("CreateContainerRequest", _create(other))
    assert not decision.allowed
    assert any(f"OCI.Version expected {version} got {other}" in p for p in decision.prints)
    decision = AgentPolicy(generated.policy_text).evaluate(
        "CreateContainerRequest", _create(version)
    )
    assert not any("OCI.Version" in p for p in decision.prints)
