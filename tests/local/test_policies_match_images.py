"""Policies and images agree: containerd's own specs for the release images pass the policies.

`generate` computes the Coordinator's, Initializer's and sidecar's policies from the release
record; here the images are pulled by digest into a real containerd, each container of the
generated pods is created the way kubelet would (the pod's command and env on the image), and
the CreateContainer request built from the spec containerd made (`kata_shim`) is evaluated with
`contrast policy evaluate` against the pod's own policy. A disagreement in entrypoint, env,
working directory, user or groups would be denied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contrast.cli.main import main
from contrast.cli.policy import load_policy_text
from contrast.images.model import ImageConfig
from contrast.kuberesource import yamlio
from contrast.kuberesource.releaseimages import release_images, tagged
from contrast.local.runners import ContainerRunner
from tests.imagebuild.builder import BuiltImages
from tests.local.kata_shim import create_container_request

APP = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    contrast.edgeless.systems/servicemesh-ingress: "web#8080#false"
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      runtimeClassName: contrast-cc
      containers:
        - name: web
          image: IMAGE
          command: ["contrast", "--version"]
          env:
            - {name: GREETING, value: hello}
"""


def _policy_data(yaml_text: str, pod: str) -> dict[str, Any]:
    text = load_policy_text(yaml_text, pod)
    data: dict[str, Any] = json.loads(text[text.index("policy_data := ") + 15 :])
    return data


def _kubelet_arguments(container: dict[str, Any], config: ImageConfig) -> list[str]:
    """What kubelet asks the runtime to run: `command` replaces the image's Entrypoint and Cmd,
    `args` replaces the Cmd."""
    if "command" in container:
        return [*container["command"], *container.get("args", [])]
    return [*(config.entrypoint or ()), *container.get("args", config.cmd or ())]


def _containers(resource: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = resource["spec"]["template"]["spec"]
    return [(c["name"], c) for c in spec.get("initContainers", []) + spec["containers"]]


def test_containerd_specs_of_the_release_images_pass_their_policies(
    built_images: BuiltImages, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resources = tmp_path / "resources"
    resources.mkdir()
    assert main(["coordinator-resources", "--platform", "emulated-snp"]) == 0
    (resources / "coordinator.yaml").write_text(capsys.readouterr().out)
    (resources / "app.yaml").write_text(APP.replace("IMAGE", tagged("initializer")))
    tee = str(tmp_path / "tee")
    workspace = ["--workspace-dir", str(tmp_path), "--emulated-tee", tee]
    assert main(["generate", *workspace, "--reference-values", "emulated-snp", str(resources)]) == 0
    capsys.readouterr()

    runner = ContainerRunner(built_images.layout, tmp_path / "containers")
    checked = []
    try:
        runner.prepare(("coordinator", "initializer", "service-mesh-proxy"))
        images = {tagged(name): reference for name, reference in runner.references.items()}
        facts = {tagged(name): image.config for name, image in release_images().items()}
        for path, pod in (
            (resources / "coordinator.yaml", "coordinator"),
            (resources / "app.yaml", "web"),
        ):
            text = path.read_text()
            policy = _policy_data(text, pod)
            documents = [
                d
                for d in yamlio.load_text(text, path, plain=True).documents
                if d.get("kind") in ("StatefulSet", "Deployment")
            ]
            for name, container in _containers(documents[0]):
                env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
                arguments = _kubelet_arguments(container, facts[container["image"]])
                added = container.get("securityContext", {}).get("capabilities", {}).get("add", [])
                spec = runner.containerd.create(
                    f"{pod}-{name}",
                    images[container["image"]],
                    arguments,
                    env=env,
                    capabilities=added,
                )
                entry = next(
                    e
                    for e in policy["containers"]
                    if e["OCI"]["Annotations"].get("io.kubernetes.cri.container-name") == name
                )
                request = create_container_request(entry, spec, container=name, sandbox=pod)
                request_file = tmp_path / f"{pod}-{name}.json"
                request_file.write_text(json.dumps(request))
                code = main(
                    ["policy", "explain", "--policy", str(path), "--pod", pod,
                     "--name", "CreateContainerRequest", "--request", str(request_file)]
                )  # fmt: skip
                output = capsys.readouterr().out
                assert code == 0, f"{pod}/{name}: {output}"
                checked.append(f"{pod}/{name}")
    finally:
        runner.stop_all()
    # The Coordinator, and the app pod's Initializer, sidecar and app container.
    assert len(checked) == 4, checked
    # The check can fail: an image that ran as another user, or without the image's PATH.
    request_file = tmp_path / "coordinator-coordinator.json"
    allowed = json.loads(request_file.read_text())
    for field, value in (("User", {**allowed["OCI"]["Process"]["User"], "UID": 65532}),
                         ("Env", allowed["OCI"]["Process"]["Env"][1:])):  # fmt: skip
        changed = json.loads(request_file.read_text())
        changed["OCI"]["Process"][field] = value
        request_file.write_text(json.dumps(changed))
        arguments = ["--policy", str(resources / "coordinator.yaml"), "--pod", "coordinator"]
        code = main(["policy", "evaluate", *arguments, "--name", "CreateContainerRequest",
                     "--request", str(request_file)])  # fmt: skip
        assert code != 0, field
    capsys.readouterr()
    print(f"{len(checked)} CreateContainer requests from containerd's specs allowed: {checked}")
