"""`generate --image-replacements`: YAML, policies and manifest name the replaced images."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contrast.kuberesource import release
from contrast.policy.initdata import ANNOTATION, decode_annotation, policy_hash
from tests.generate.conftest import (
    USER_IMAGES,
    GenerateWorkspace,
    reference_values_file,
    write_layout,
)

EMULATED = ("--reference-values", "emulated-snp")
MIRROR = "mirror.example:5000"
FRONTEND = "ghcr.io/example/frontend:1.4.2"
REPLACED = {
    release.INITIALIZER_IMAGE: f"{MIRROR}/contrast/initializer:v1",
    release.SERVICE_MESH_IMAGE: f"{MIRROR}/contrast/service-mesh-proxy:v1",
    release.COORDINATOR_IMAGE: f"{MIRROR}/contrast/coordinator:v1",
    FRONTEND: f"{MIRROR}/example/frontend:1.4.2",
}


@pytest.fixture
def mirrored(tmp_path: Path) -> GenerateWorkspace:
    """The sidecar example and a Coordinator; the layout also has the frontend's mirror."""
    workspace = GenerateWorkspace(
        root=tmp_path / "workspace",
        layout=write_layout(tmp_path / "layout", (*USER_IMAGES, REPLACED[FRONTEND])),
        reference_values=reference_values_file(tmp_path / "reference-values.json"),
    )
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("emulated-snp")
    return workspace


def _replacements(path: Path) -> Path:
    lines = ["# mirror of this release", *(f"{old} = {new}" for old, new in REPLACED.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def _pods(workspace: GenerateWorkspace, name: str) -> dict[str, dict[str, Any]]:
    """Pod templates by workload name."""
    return {
        document["metadata"]["name"]: document["spec"]["template"]
        for document in workspace.documents(name)
        if document["kind"] in ("Deployment", "StatefulSet")
    }


def _images(pod: dict[str, Any]) -> list[str]:
    spec = pod["spec"]
    return [c["image"] for c in (*spec.get("initContainers", []), *spec["containers"])]


def _policy(pod: dict[str, Any]) -> bytes:
    return decode_annotation(pod["metadata"]["annotations"][ANNOTATION])


def test_yaml_policies_and_manifest_describe_the_replaced_images(
    mirrored: GenerateWorkspace, tmp_path: Path
) -> None:
    file = _replacements(tmp_path / "replacements.txt")
    resources = str(mirrored.resources)
    assert mirrored.generate(*EMULATED, "--image-replacements", str(file), resources) == 0
    pods = _pods(mirrored, "app.yml") | _pods(mirrored, "coordinator.yml")
    web_images = _images(pods["web"])
    assert web_images[:2] == [
        REPLACED[release.INITIALIZER_IMAGE],
        REPLACED[release.SERVICE_MESH_IMAGE],
    ]
    assert web_images[2].split("@")[0] == REPLACED[FRONTEND]
    assert _images(pods["coordinator"]) == [REPLACED[release.COORDINATOR_IMAGE]]
    policies = {name: _policy(pod) for name, pod in pods.items()}
    for old in REPLACED:
        assert all(old.encode() not in policy for policy in policies.values())
    assert REPLACED[release.INITIALIZER_IMAGE].encode() in policies["backend"]
    assert REPLACED[release.SERVICE_MESH_IMAGE].encode() in policies["web"]
    assert REPLACED[FRONTEND].encode() in policies["web"]
    assert REPLACED[release.COORDINATOR_IMAGE].encode() in policies["coordinator"]
    manifest = set(mirrored.manifest()["Policies"])
    assert manifest == {policy_hash(policy).hex() for policy in policies.values()}

    # A second run over its own output, with the same file, changes nothing.
    before = mirrored.snapshot()
    assert mirrored.generate(*EMULATED, "--image-replacements", str(file), resources) == 0
    assert mirrored.snapshot() == before


def test_replacing_changes_the_policies(mirrored: GenerateWorkspace, tmp_path: Path) -> None:
    file = tmp_path / "replacements.txt"
    file.write_text(f"{release.SERVICE_MESH_IMAGE}={REPLACED[release.SERVICE_MESH_IMAGE]}\n")
    assert mirrored.generate(*EMULATED, str(mirrored.resources)) == 0
    without = dict(mirrored.manifest()["Policies"])
    web_without = _policy(_pods(mirrored, "app.yml")["web"])
    without_yaml = (mirrored.resources / "app.yml").read_text()
    assert release.SERVICE_MESH_IMAGE in without_yaml
    assert (
        mirrored.generate(*EMULATED, "--image-replacements", str(file), str(mirrored.resources))
        == 0
    )
    with_replacements = mirrored.manifest()["Policies"]
    # The two pods with the sidecar get new policies; the Coordinator's stays.
    assert len(set(without) - set(with_replacements)) == 2
    assert len(set(without) & set(with_replacements)) == 1
    assert release.SERVICE_MESH_IMAGE not in (mirrored.resources / "app.yml").read_text()
    # The mirror is described as the release image is: only its name differs.
    web_with = _policy(_pods(mirrored, "app.yml")["web"])
    old, new = release.SERVICE_MESH_IMAGE.encode(), REPLACED[release.SERVICE_MESH_IMAGE].encode()
    assert web_with != web_without
    assert web_with == web_without.replace(old, new)


def test_a_malformed_file_is_one_line_and_changes_nothing(
    mirrored: GenerateWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert mirrored.generate(*EMULATED, str(mirrored.resources)) == 0
    file = tmp_path / "replacements.txt"
    file.write_text(f"# ok\n{FRONTEND}\n")
    before = mirrored.snapshot()
    capsys.readouterr()
    code = mirrored.generate(*EMULATED, "--image-replacements", str(file), str(mirrored.resources))
    err = capsys.readouterr().err
    assert code == 1
    assert err == (
        f"contrast: {file}:2: {FRONTEND!r} is not IMAGE=REPLACEMENT"
        " (write one IMAGE=REPLACEMENT per line; # starts a comment)\n"
    )
    assert mirrored.snapshot() == before
