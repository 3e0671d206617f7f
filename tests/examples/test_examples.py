"""The example applications (examples/emojivoto, mysql, vault) through `generate`.

The examples name the images a user would pull (upstream's emojivoto, Docker's MySQL, OpenBao's
own image); no public registry can be reached here, so each test maps them with
`--image-replacements` to stand-ins in an OCI layout built by the test (each with a config of
its own: entrypoint, PATH, users), as a user with a mirror would. What is checked is what
`generate` makes of the examples as written: the injected containers (Initializer, the mesh
sidecar with the annotations' listeners, the encrypted volume's Initializer), the images the
YAML, the policies and the manifest name, the workload secret IDs, and that a policy covers what
the example relies on (the Vault's configuration in its environment). A misspelt Contrast
annotation in any of them fails in one line.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from contrast.cli.main import main
from contrast.cli.policy import load_policy_text
from contrast.kuberesource.inject import INITIALIZER_NAME, SERVICE_MESH_NAME
from contrast.kuberesource.release import INITIALIZER_IMAGE, SERVICE_MESH_IMAGE
from contrast.policy.initdata import ANNOTATION
from tests.examples.conftest import EXAMPLES, IMAGES, MIRROR, generated, replacements_file
from tests.generate.conftest import GenerateWorkspace
from tests.local.kata_shim import create_container_request

PODS = {
    "emojivoto": ("emoji", "voting", "web", "vote-bot"),
    "mysql": ("mysql-backend", "mysql-client"),
    "vault": ("vault", "vault-client"),
}


def _workloads(workspace: GenerateWorkspace, example: str) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d
        for d in workspace.documents(f"{example}.yml")
        if d["kind"] in ("Deployment", "StatefulSet")
    }


def _containers(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


@pytest.mark.parametrize("example", sorted(PODS))
def test_the_examples_are_valid_kubernetes_as_written(example: str) -> None:
    for document in YAML(typ="safe").load_all((EXAMPLES / example / f"{example}.yml").read_text()):
        kubernetes_validate.validate(document, "1.33", strict=True)


@pytest.mark.parametrize("example", sorted(PODS))
def test_each_example_generates_with_the_images_replaced(
    workspace: GenerateWorkspace, example: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generated(workspace, example) == 0, capsys.readouterr().err
    text = (workspace.resources / f"{example}.yml").read_text()
    workloads = _workloads(workspace, example)
    assert set(workloads) == set(PODS[example])
    mirrored = {f"{MIRROR}/{name}" for name, _ in IMAGES.values()}
    for name, workload in workloads.items():
        containers = _containers(workload)
        assert INITIALIZER_NAME in containers, name
        for container in containers.values():
            assert container["image"] in mirrored | {INITIALIZER_IMAGE, SERVICE_MESH_IMAGE}
        assert ANNOTATION in workload["spec"]["template"]["metadata"]["annotations"]
        # The policy names the replaced images, never the upstream ones.
        policy = load_policy_text(text, name)
        assert not any(upstream in policy for upstream in IMAGES), name
    # One policy per pod and the Coordinator's.
    assert len(workspace.manifest()["Policies"]) == len(PODS[example]) + 1
    capsys.readouterr()


def test_emojivoto_gets_the_mesh_its_annotations_ask_for(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generated(workspace, "emojivoto") == 0, capsys.readouterr().err
    workloads = _workloads(workspace, "emojivoto")
    for name in PODS["emojivoto"]:
        sidecar = _containers(workloads[name])[SERVICE_MESH_NAME]
        assert sidecar["restartPolicy"] == "Always"
    env = {e["name"]: e["value"] for e in _containers(workloads["web"])[SERVICE_MESH_NAME]["env"]}
    assert env["CONTRAST_INGRESS_PROXY_CONFIG"] == "web#8080#false"
    assert env["CONTRAST_EGRESS_PROXY_CONFIG"] == (
        "emoji#127.137.0.1:8081#emoji-svc:8080##voting#127.137.0.2:8081#voting-svc:8080"
    )
    bot_sidecar = _containers(workloads["vote-bot"])[SERVICE_MESH_NAME]
    bot = {e["name"]: e["value"] for e in bot_sidecar["env"]}
    assert bot["CONTRAST_EGRESS_PROXY_CONFIG"] == "web#127.137.0.3:8080#web-svc:443"
    capsys.readouterr()


@pytest.mark.parametrize(("example", "pod"), [("mysql", "mysql-backend"), ("vault", "vault")])
def test_the_databases_get_the_encrypted_volume(
    workspace: GenerateWorkspace, example: str, pod: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generated(workspace, example) == 0, capsys.readouterr().err
    initializer = _containers(_workloads(workspace, example)[pod])[INITIALIZER_NAME]
    assert initializer["volumeDevices"] == [{"name": "state", "devicePath": "/dev/csi0"}]
    assert {"name": "CRYPTSETUP_DEVICE", "value": "/dev/csi0"} in initializer["env"]
    assert initializer["securityContext"]["privileged"] is True
    assert initializer["restartPolicy"] == "Always"
    capsys.readouterr()


def _policy_data(path: Path, pod: str) -> dict[str, Any]:
    text = load_policy_text(path.read_text(), pod)
    data: dict[str, Any] = json.loads(text[text.index("policy_data := ") + 15 :])
    return data


def _allowed(path: Path, pod: str, request: dict[str, Any], tmp_path: Path) -> bool:
    request_file = tmp_path / "request.json"
    request_file.write_text(json.dumps(request))
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["policy", "evaluate", "--policy", str(path), "--pod", pod, "--name",
                     "CreateContainerRequest", "--request", str(request_file)])  # fmt: skip
    return code == 0


def test_the_vault_unseals_with_its_workload_secret_id_and_its_config_is_in_the_policy(
    workspace: GenerateWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generated(workspace, "vault") == 0, capsys.readouterr().err
    entries = workspace.manifest()["Policies"].values()
    # The transit key name of its seal stanza is its workload secret ID.
    vault_entries = [e for e in entries if e.get("WorkloadSecretID") == "vault_unsealing"]
    assert len(vault_entries) == 1
    assert "vault" in vault_entries[0]["SANs"]
    path = workspace.resources / "vault.yml"
    vault = _containers(_workloads(workspace, "vault")["vault"])["vault"]
    config = next(e["value"] for e in vault["env"] if e["name"] == "VAULT_CONFIG")
    assert 'key_name        = "vault_unsealing"' in config
    policy = _policy_data(path, "vault")
    entry = next(
        e
        for e in policy["containers"]
        if e["OCI"]["Annotations"].get("io.kubernetes.cri.container-name") == "vault"
    )
    caps = policy["common"]["default_caps"]

    def request(value: str) -> dict[str, Any]:
        spec = {
            "process": {
                "args": vault["command"],
                "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "HOSTNAME=vault-0", f"VAULT_CONFIG={value}"],
                "cwd": "/",
                "user": {"uid": 0, "gid": 0, "additionalGids": [0]},
                "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            }
        }  # fmt: skip
        return create_container_request(entry, spec, container="vault", sandbox="vault-0")

    assert _allowed(path, "vault", request(config), tmp_path)
    # A host that points the seal at a transit engine of its own is refused.
    rogue = config.replace("https://coordinator:8200", "https://attacker:8200")
    assert not _allowed(path, "vault", request(rogue), tmp_path)
    capsys.readouterr()


@pytest.mark.parametrize(
    ("example", "annotation"),
    [
        ("emojivoto", "servicemesh-egress"),
        ("mysql", "secure-pv"),
        ("vault", "workload-secret-id"),
    ],
)
def test_a_misspelt_annotation_in_an_example_fails_in_one_line(
    workspace: GenerateWorkspace, example: str, annotation: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    source = (EXAMPLES / example / f"{example}.yml").read_text()
    key = f"contrast.edgeless.systems/{annotation}:"
    assert key in source
    workspace.resources.mkdir(parents=True)
    misspelt = source.replace(key, key.replace(annotation, annotation + "s"), 1)
    (workspace.resources / f"{example}.yml").write_text(misspelt)
    replacements = replacements_file(workspace.root.parent / "replacements.txt")
    workspace.add_coordinator("emulated-snp")
    capsys.readouterr()
    code = workspace.generate("--reference-values", "emulated-snp", "--image-replacements",
                              str(replacements), str(workspace.resources))  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"unknown annotation contrast.edgeless.systems/{annotation}s (did you mean" in err
    assert (workspace.resources / f"{example}.yml").read_text() == misspelt
