"""Release resources validate against the official Kubernetes schema and carry the right values."""

from __future__ import annotations

import io
from typing import Any

import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from contrast.cli.main import main
from contrast.kuberesource import release
from contrast.platforms import PLATFORMS, Platform, by_name

KUBERNETES = "1.33"


def validate(resource: dict[str, Any]) -> None:
    kubernetes_validate.validate(resource, KUBERNETES, strict=True)


@pytest.mark.parametrize("platform", PLATFORMS, ids=lambda p: p.name)
def test_every_resource_validates(platform: Platform) -> None:
    for resource in release.runtime_resources(platform, node_selector={"tee": platform.tee}):
        validate(resource)
    for resource in release.coordinator_resources(platform):
        validate(resource)


def test_runtime_class_has_overhead_and_selector() -> None:
    platform = by_name("metal-qemu-snp-gpu")
    runtime_class = release.runtime_class(platform, node_selector={"gpu": "h100"})
    assert runtime_class["handler"] == platform.runtime_class_name
    assert runtime_class["overhead"] == {"podFixed": {"memory": "1194Mi"}}
    assert runtime_class["scheduling"] == {"nodeSelector": {"gpu": "h100"}}
    assert "scheduling" not in release.runtime_class(platform)


def test_coordinator_services() -> None:
    statefulset, public, ready = release.coordinator_resources(by_name("metal-qemu-tdx"))
    assert statefulset["spec"]["template"]["spec"]["runtimeClassName"].startswith(
        "contrast-cc-metal-qemu-tdx-"
    )
    assert public["spec"]["type"] == "LoadBalancer"
    assert public["spec"]["publishNotReadyAddresses"] is True
    assert [port["port"] for port in public["spec"]["ports"]] == [1313, 7777, 9102]
    assert ready["metadata"]["name"] == "coordinator-ready"
    assert "type" not in ready["spec"]


def test_cli_prints_yaml_that_validates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runtime", "--platform", "Metal-QEMU-SNP", "--node-selector", "a=b"]) == 0
    documents = list(YAML(typ="safe").load_all(io.StringIO(capsys.readouterr().out)))
    assert [document["kind"] for document in documents] == ["RuntimeClass", "DaemonSet"]
    for document in documents:
        validate(document)
    assert main(["coordinator-resources", "--platform", "emulated-snp"]) == 0
    documents = list(YAML(typ="safe").load_all(io.StringIO(capsys.readouterr().out)))
    assert [document["kind"] for document in documents] == ["StatefulSet", "Service", "Service"]


def test_bad_node_selector_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runtime", "--platform", "metal-qemu-snp", "--node-selector", "oops"]) == 1
    assert "is not KEY=VALUE" in capsys.readouterr().err


def test_the_schema_check_can_fail() -> None:
    broken = release.runtime_class(by_name("metal-qemu-snp"))
    broken["overhead"]["podFixed"]["memory"] = ["not", "a", "quantity"]
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)
