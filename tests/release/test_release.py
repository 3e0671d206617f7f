"""Release resources validate against the official Kubernetes schema and carry the right values."""

from __future__ import annotations

import io
from pathlib import Path
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
    *_, statefulset, public, ready, _peers = release.coordinator_resources(
        by_name("metal-qemu-tdx")
    )
    assert statefulset["spec"]["template"]["spec"]["runtimeClassName"].startswith(
        "contrast-cc-metal-qemu-tdx-"
    )
    assert public["spec"]["type"] == "LoadBalancer"
    assert public["spec"]["publishNotReadyAddresses"] is True
    assert [port["port"] for port in public["spec"]["ports"]] == [1313, 7777, 9102, 8200]
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
    assert [document["kind"] for document in documents][-4:] == [
        "StatefulSet", "Service", "Service", "Service"
    ]  # fmt: skip


def test_bad_node_selector_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runtime", "--platform", "metal-qemu-snp", "--node-selector", "oops"]) == 1
    assert "is not KEY=VALUE" in capsys.readouterr().err


def test_the_schema_check_can_fail() -> None:
    broken = release.runtime_class(by_name("metal-qemu-snp"))
    broken["overhead"]["podFixed"]["memory"] = ["not", "a", "quantity"]
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)


def _printed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def _images(text: str) -> list[str]:
    documents = YAML(typ="safe").load_all(io.StringIO(text))
    return [
        container["image"]
        for document in documents
        if document["kind"] in ("DaemonSet", "StatefulSet")
        for key in ("initContainers", "containers")
        for container in document["spec"]["template"]["spec"].get(key, [])
    ]


def test_image_replacements_in_printed_resources(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = tmp_path / "replacements.txt"
    file.write_text(
        "# an air-gapped mirror\n"
        f"{release.NODE_INSTALLER_IMAGE}=mirror.example/contrast/node-installer:v1\n"
        f"{release.PAUSE_IMAGE} = mirror.example/pause:3.10\n"
        f"{release.COORDINATOR_IMAGE}=mirror.example/contrast/coordinator:v1\n"
    )
    runtime = ["runtime", "--platform", "metal-qemu-snp"]
    coordinator = ["coordinator-resources", "--platform", "metal-qemu-tdx"]
    replaced = ["--image-replacements", str(file)]
    assert _images(_printed(capsys, runtime)) == [release.NODE_INSTALLER_IMAGE, release.PAUSE_IMAGE]
    assert _images(_printed(capsys, [*runtime, *replaced])) == [
        "mirror.example/contrast/node-installer:v1",
        "mirror.example/pause:3.10",
    ]
    assert _images(_printed(capsys, [*coordinator, *replaced])) == [
        "mirror.example/contrast/coordinator:v1"
    ]
    # A file that replaces none of these images prints exactly what no file prints.
    file.write_text("ghcr.io/example/app:v1=mirror.example/app:v1\n")
    for argv in (runtime, coordinator):
        assert _printed(capsys, [*argv, *replaced]) == _printed(capsys, argv)


def test_malformed_image_replacements_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = tmp_path / "replacements.txt"
    file.write_text(f"{release.COORDINATOR_IMAGE}=\n")
    for argv in (
        ["runtime", "--platform", "metal-qemu-snp"],
        ["coordinator-resources", "--platform", "metal-qemu-snp"],
    ):
        capsys.readouterr()
        assert main([*argv, "--image-replacements", str(file)]) == 1
        out, err = capsys.readouterr()
        assert out == ""
        assert err == (
            f"contrast: {file}:1: no replacement for {release.COORDINATOR_IMAGE!r}"
            " (write one IMAGE=REPLACEMENT per line; # starts a comment)\n"
        )
    argv = ["runtime", "--image-replacements", str(file), "build", "--platform", "metal-qemu-snp",
            "--kata-release", str(tmp_path / "missing")]  # fmt: skip
    assert main(argv) == 1
    assert "not to `runtime build`" in capsys.readouterr().err
