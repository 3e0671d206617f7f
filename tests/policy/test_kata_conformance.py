"""Kata's own policy test cases against policies this project generates from the same pods.

Kata's harness (src/tools/genpolicy/tests/policy/main.rs) generates a policy from each test
directory's pod.yaml (plus config_map.yaml) with genpolicy-settings.json alone, loads it like the
agent and replays testcases.json in order, state kept. We do the same with our rules, our
generator and our evaluator, fed with image-facts.json instead of registries
(../shared/testdata/kata-policy/README.md, "Doing the same offline").
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from contrast.images.model import ImageConfig, ImageFacts
from contrast.kuberesource.workloads import Workload, workloads
from contrast.policy.engine import AgentPolicy
from contrast.policy.generate import GeneratedPolicy, PolicyGenerator, default_rules
from contrast.policy.generation_errors import PolicyGenerationError
from contrast.policy.settings import Settings, load_settings

DATA = Path(__file__).resolve().parents[3] / "shared" / "testdata" / "kata-policy"
TEST_FILES = sorted(DATA.glob("**/testcases.json"))
EXPECTED_CASES = 88

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="needs ../shared/testdata/kata-policy")


def facts(reference: str, entry: dict[str, Any]) -> ImageFacts:
    # The digest only pins YAML; policies never contain it, so a stand-in derived from the
    # reference keeps the facts distinct without pretending to be the registry's.
    digest = "sha256:" + hashlib.sha256(reference.encode()).hexdigest()
    return ImageFacts(
        reference,
        digest,
        ImageConfig.from_json(entry["config"]),
        entry["etc_passwd"],
        entry["etc_group"],
    )


def image_facts() -> dict[str, ImageFacts]:
    images = json.loads((DATA / "image-facts.json").read_text())["images"]
    return {reference: facts(reference, entry) for reference, entry in images.items()}


def kata_settings() -> Settings:
    return load_settings(DATA / "genpolicy-settings.json")


def load_yaml(path: Path) -> list[Any]:
    return [doc for doc in YAML(typ="safe").load_all(path.read_text()) if doc is not None]


def only_workload(path: Path) -> Workload:
    found = list(workloads(load_yaml(path)))
    assert len(found) == 1, f"{path} must hold exactly one workload"
    return found[0]


IMAGE_NAME = "io.kubernetes.cri.image-name"
CONTAINER_NAME = "io.kubernetes.cri.container-name"


def generated_for(directory: Path) -> GeneratedPolicy:
    config = directory / "config_map.yaml"
    return PolicyGenerator(default_rules(), kata_settings()).generate(
        only_workload(directory / "pod.yaml"),
        image_facts(),
        load_yaml(config) if config.exists() else [],
    )


def lacks_image_name(case: dict[str, Any]) -> bool:
    """A CreateContainer case of a workload container without CRI's image-name annotation."""
    annotations = case["request"].get("OCI", {}).get("Annotations") or {}
    return (
        case["kind"] == "CreateContainerRequest"
        and CONTAINER_NAME in annotations
        and IMAGE_NAME not in annotations
    )


def with_image_name(case: dict[str, Any], policy_data: dict[str, Any]) -> dict[str, Any]:
    """The case with the image-name annotation containerd always sets: its container's image.

    Some of Kata's cases leave it out, which its rules allow since they check no image; ours
    require the policy's image there (a swapped image must not start), so the cases get the
    annotation CRI would have written. test_a_case_without_the_image_name_is_refused keeps the
    difference visible.
    """
    if not lacks_image_name(case):
        return case
    annotations = case["request"]["OCI"]["Annotations"]
    (image,) = [
        c["OCI"]["Annotations"][IMAGE_NAME]
        for c in policy_data["containers"]
        if c["OCI"]["Annotations"].get(CONTAINER_NAME) == annotations[CONTAINER_NAME]
    ]
    changed = copy.deepcopy(case)
    changed["request"]["OCI"]["Annotations"][IMAGE_NAME] = image
    return changed


@functools.cache  # each directory is replayed once, for both tests below
def run_directory(directory: Path) -> tuple[tuple[str, bool, bool], ...]:
    """(description, expected, decided) for every case of one test directory, in order."""
    generated = generated_for(directory)
    policy = AgentPolicy(generated.policy_text)
    results = []
    for original in json.loads((directory / "testcases.json").read_text()):
        case = with_image_name(original, dict(generated.policy_data))
        decision = policy.evaluate(case["kind"], case["request"])
        results.append((case["description"], bool(case["allowed"]), decision.allowed))
    return tuple(results)


@pytest.mark.parametrize(
    "directory",
    [f.parent for f in TEST_FILES],
    ids=[str(f.parent.relative_to(DATA)) for f in TEST_FILES],
)
def test_directory_agrees_with_kata(directory: Path) -> None:
    disagreements = [(d, e, g) for d, e, g in run_directory(directory) if e != g]
    assert disagreements == []


def test_every_case_agrees(capsys: pytest.CaptureFixture[str]) -> None:
    results = [result for file in TEST_FILES for result in run_directory(file.parent)]
    agree = sum(expected == decided for _, expected, decided in results)
    with capsys.disabled():
        print(f"\nkata conformance: {agree}/{len(results)} cases agree")
    assert len(results) == EXPECTED_CASES
    assert agree == len(results)


def test_a_case_without_the_image_name_is_refused() -> None:
    """Where Kata allows a container with no image-name annotation, ours refuse it by name."""
    refused = 0
    for file in TEST_FILES:
        generated = generated_for(file.parent)
        policy = AgentPolicy(generated.policy_text)
        for case in json.loads(file.read_text()):
            if not (case["allowed"] and lacks_image_name(case)):
                continue
            decision = policy.evaluate(case["kind"], case["request"])
            assert not decision.allowed, case["description"]
            assert any(f"{IMAGE_NAME} expected" in line for line in decision.prints)
            refused += 1
            policy = AgentPolicy(generated.policy_text)  # each case from a fresh state
    assert refused == 4


# Generation-only tests (Kata's tests/generate). Their pods use
# "quay.io/prometheus/busybox:latest", whose facts image-facts.json records.
def generate_only(yaml_name: str, *config_names: str) -> None:
    settings = kata_settings()
    generator = PolicyGenerator(default_rules(), settings)
    config = [doc for name in config_names for doc in load_yaml(DATA / "generate" / name)]
    for workload in workloads(load_yaml(DATA / "generate" / yaml_name)):
        images = image_facts()
        assert generator.required_images(workload) <= set(images)
        generator.generate(workload, images, config)


def test_config_map_in_another_file_is_required() -> None:
    with pytest.raises(PolicyGenerationError, match="ConfigMap 'configmap-sample'"):
        generate_only("pod_with_config_map_ref.yaml")
    generate_only("pod_with_config_map_ref.yaml", "config_map.yaml")


def test_secret_in_another_file_is_required() -> None:
    with pytest.raises(PolicyGenerationError, match="Secret"):
        generate_only("pod_with_secret_ref.yaml")
    generate_only("pod_with_secret_ref.yaml", "secret.yaml")


def test_simple_pod_generates() -> None:
    generate_only("simple_pod.yaml")


def busybox_pod(pod_context: dict[str, Any], container_context: dict[str, Any]) -> Workload:
    container: dict[str, Any] = {
        "name": "busybox",
        "image": "quay.io/prometheus/busybox:latest",
        "command": ["sh"],
        "args": ["-c", "sleep 3600"],
    }
    if container_context:
        container["securityContext"] = container_context
    spec: dict[str, Any] = {"containers": [container]}
    if pod_context:
        spec["securityContext"] = pod_context
    return Workload({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bb"}, "spec": spec})


def generate_busybox(pod_context: dict[str, Any], container_context: dict[str, Any]) -> None:
    PolicyGenerator(default_rules(), kata_settings()).generate(
        busybox_pod(pod_context, container_context), image_facts()
    )


def test_guest_pull_without_explicit_identity_fails() -> None:
    with pytest.raises(PolicyGenerationError) as caught:
        generate_busybox({}, {})
    message = str(caught.value)
    assert "ERROR: guest_pull is enabled" in message
    assert "Set explicit Kubernetes securityContext values" in message
    assert "supplementalGroups: [10]" in message
    assert "runAsUser: 0" not in message
    assert "runAsGroup: 0" not in message


def test_guest_pull_names_the_passwd_group_of_an_explicit_user() -> None:
    with pytest.raises(PolicyGenerationError) as caught:
        generate_busybox({"runAsUser": 33}, {})
    message = str(caught.value)
    assert "runAsUser: 33" in message
    assert "runAsGroup: 33" in message
    assert "supplementalGroups" not in message


@pytest.mark.parametrize(
    ("pod_context", "container_context"),
    [
        ({"runAsUser": 1000}, {}),
        ({"supplementalGroups": [10]}, {}),
        ({"runAsUser": 0, "supplementalGroups": [10]}, {"runAsGroup": 0}),
        ({"supplementalGroups": [10]}, {"runAsUser": 0, "runAsGroup": 0}),
    ],
)
def test_guest_pull_with_explicit_identity_succeeds(
    pod_context: dict[str, Any], container_context: dict[str, Any]
) -> None:
    generate_busybox(pod_context, container_context)
