"""`contrast generate` on the seeds' examples: multi-runtime, sidecar TLS, GPU, a kustomize build.

Each run checks what a platform engineer relies on: runtime classes resolved per platform, the
Initializer and sidecar injected, one policy annotation per confidential pod whose hash is the
manifest's key, reference values for exactly the platforms used, every resource still valid
against the official Kubernetes schema, and a second run that changes nothing.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from contrast.kuberesource.workloads import workloads
from contrast.manifest.model import Manifest
from contrast.platforms import by_name
from contrast.policy.initdata import ANNOTATION, Initdata, decode_annotation, policy_hash
from tests.generate.conftest import GenerateWorkspace

KUBERNETES = "1.33"


def pod_annotations(workload_document: dict[str, Any]) -> dict[str, Any]:
    (workload,) = workloads([workload_document])
    return dict(workload.pod_annotations)


def policy_hashes(workspace: GenerateWorkspace, name: str) -> dict[str, str]:
    """Workload name → policy hash of its initdata annotation, for every annotated workload."""
    hashes = {}
    for document in workspace.documents(name):
        for workload in workloads([document]):
            value = workload.pod_annotation(ANNOTATION)
            if value is not None:
                hashes[workload.name] = policy_hash(decode_annotation(value)).hex()
    return hashes


def validate_all(workspace: GenerateWorkspace) -> int:
    count = 0
    for path in sorted(workspace.resources.rglob("*.yml")):
        for document in workspace.documents(path.name):
            kubernetes_validate.validate(document, KUBERNETES, strict=True)
            count += 1
    return count


def assert_second_run_changes_nothing(workspace: GenerateWorkspace, *arguments: str) -> None:
    before = workspace.snapshot()
    assert workspace.generate(*arguments, str(workspace.resources)) == 0
    assert workspace.snapshot() == before


def test_multi_runtime(workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]) -> None:
    workspace.add_example("multi-runtime")
    workspace.add_coordinator("metal-qemu-snp")
    arguments = ("--reference-values", "metal-qemu-snp")
    assert workspace.generate(*arguments, str(workspace.resources)) == 0

    snp, tdx = by_name("metal-qemu-snp"), by_name("metal-qemu-tdx")
    classes = {
        document["metadata"]["name"]: document["spec"]["template"]["spec"].get("runtimeClassName")
        for document in workspace.documents("app.yml")
        if document["kind"] in {"Deployment", "StatefulSet", "Job"}
    }
    assert classes == {
        "frontend": snp.runtime_class_name,  # its placeholder
        "ledger": tdx.runtime_class_name,  # its placeholder wins over --reference-values
        "migrate": snp.runtime_class_name,  # contrast-cc takes --reference-values
        "metrics-exporter": None,  # not confidential
    }
    hashes = policy_hashes(workspace, "app.yml")
    assert set(hashes) == {"frontend", "ledger", "migrate"}
    exporter = next(
        d for d in workspace.documents("app.yml") if d["metadata"]["name"] == "metrics-exporter"
    )
    assert "initContainers" not in exporter["spec"]["template"]["spec"]

    manifest = Manifest.from_bytes((workspace.root / "manifest.json").read_bytes())
    coordinator = policy_hashes(workspace, "coordinator.yml")["coordinator"]
    assert set(manifest.policies) == {*hashes.values(), coordinator}
    assert (
        manifest.policies[hashes["ledger"]].workload_secret_id == "apps/v1/StatefulSet/shop/ledger"
    )
    assert manifest.policies[hashes["migrate"]].sans == ("migrate", "*")
    assert manifest.coordinator_policy_hashes == [coordinator]
    platforms = {entry.platform for entry in manifest.reference_values.entries}
    assert platforms == {"Metal-QEMU-SNP", "Metal-QEMU-TDX"}

    out = capsys.readouterr().out
    assert "MinimumTCB" in out
    assert "MrSeam" in out
    assert validate_all(workspace) == 13  # 6 of them the Coordinator's
    assert_second_run_changes_nothing(workspace, *arguments)


def test_sidecar_tls(workspace: GenerateWorkspace) -> None:
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("emulated-snp")
    assert workspace.generate("--reference-values", "emulated-snp", str(workspace.resources)) == 0

    web, backend = workspace.documents("app.yml")
    init = {c["name"]: c for c in web["spec"]["template"]["spec"]["initContainers"]}
    assert list(init) == ["contrast-initializer", "contrast-service-mesh"]
    env = {e["name"]: e["value"] for e in init["contrast-service-mesh"]["env"]}
    assert env["CONTRAST_INGRESS_PROXY_CONFIG"] == "main#8001#false##metrics#8080#true"
    assert env["CONTRAST_EGRESS_PROXY_CONFIG"] == "backend#127.0.0.2:4001#backend.default:4001"
    assert init["contrast-service-mesh"]["restartPolicy"] == "Always"
    initializer_env = {e["name"] for e in init["contrast-initializer"]["env"]}
    assert "CONTRAST_SERVICE_MESH_DISABLED" not in initializer_env
    # The mesh sidecar's container is part of the policy: its initdata lists it.
    toml = decode_annotation(pod_annotations(web)[ANNOTATION])
    assert "contrast-service-mesh" in (Initdata.from_toml(toml).policy or "")
    backend_init = [c["name"] for c in backend["spec"]["template"]["spec"]["initContainers"]]
    assert backend_init == ["contrast-initializer", "contrast-service-mesh"]
    manifest = workspace.manifest()
    assert [e["Platform"] for e in manifest["ReferenceValues"]["snp"]] == ["Emulated-SNP"]
    assert validate_all(workspace) == 9
    assert_second_run_changes_nothing(workspace, "--reference-values", "emulated-snp")


def test_gpu(workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]) -> None:
    workspace.add_example("gpu")
    workspace.add_coordinator("metal-qemu-snp")
    assert workspace.generate("--reference-values", "metal-qemu-snp", str(workspace.resources)) == 0
    (pod,) = workspace.documents("app.yml")
    assert pod["spec"]["runtimeClassName"] == by_name("metal-qemu-snp-gpu").runtime_class_name
    policy = Initdata.from_toml(decode_annotation(pod["metadata"]["annotations"][ANNOTATION]))
    assert "nvidia" in (policy.policy or "")  # the GPU's CDI annotation pattern is allowed
    manifest = workspace.manifest()
    assert {e["Platform"] for e in manifest["ReferenceValues"]["snp"]} == {
        "Metal-QEMU-SNP",
        "Metal-QEMU-SNP-GPU",
    }
    assert validate_all(workspace) == 8


def test_gpu_pod_missing_its_settings_is_warned_about(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace.add_example("gpu")
    workspace.add_coordinator("metal-qemu-snp")
    path = workspace.resources / "app.yml"
    path.write_text(
        path.read_text()
        .replace('    cdi.k8s.io/gpu: "nvidia.com/pgpu=0"\n', "")
        .replace("        - name: NVIDIA_VISIBLE_DEVICES\n          value: all\n", "")
        .replace("      env:\n", "")
    )
    assert workspace.generate("--reference-values", "metal-qemu-snp", str(workspace.resources)) == 0
    err = capsys.readouterr().err
    assert "cdi.k8s.io" in err
    assert "NVIDIA_VISIBLE_DEVICES" in err


def test_kustomize_build(workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]) -> None:
    workspace.add_example("kustomize-app")
    (workspace.resources / "base").rename(workspace.root / "kustomize-base")
    workspace.add_coordinator("emulated-tdx")
    before = (workspace.resources / "build.yml").read_text()
    assert workspace.generate("--reference-values", "emulated-tdx", str(workspace.resources)) == 0
    after = (workspace.resources / "build.yml").read_text()
    # The namespace, config map and service documents stay byte for byte as kustomize wrote them.
    assert after.split("kind: Deployment")[0] == before.split("kind: Deployment")[0]
    (deployment,) = [d for d in workspace.documents("build.yml") if d["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == by_name("emulated-tdx").runtime_class_name
    initializer = spec["initContainers"][0]
    assert {"name": "COORDINATOR_HOST", "value": "coordinator-ready.default"} in initializer["env"]
    assert {"name": "CONTRAST_SERVICE_MESH_DISABLED", "value": "true"} in initializer["env"]
    # envFrom of the generated config map is resolved into the policy.
    policy = Initdata.from_toml(decode_annotation(pod_annotations(deployment)[ANNOTATION])).policy
    assert "GREETING=hello" in (policy or "")
    warnings = capsys.readouterr().err
    assert "ghcr.io/example/guestbook:3.1" in warnings
    assert "digest" in warnings
    manifest = workspace.manifest()
    assert [e["Platform"] for e in manifest["ReferenceValues"]["tdx"]] == ["Emulated-TDX"]
    assert validate_all(workspace) == 11
    assert_second_run_changes_nothing(workspace, "--reference-values", "emulated-tdx")
