"""`generate --inject-image-store` on the original's how-to YAML: sidecar, volume and policy.

The how-to (docs/howto/secure-image-store) puts `image-store-size` on the pod's metadata
(`v1.Pod, v1.PodTemplateSpec`); its manual setup binds `/dev/image_store` in a sidecar of the
user's own. The policy of a generated pod must admit the CreateContainer request the agent gets
for the injected `pvc-holder` (the Initializer's image holding still, privileged, the block
device at /dev/image_store) and nothing wider: the device elsewhere, another command, or the
app container asking for the device. (A request with no device at all passes, as Kata's rules
let a container have fewer devices than its policy lists.)
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from contrast.cli.main import main
from contrast.cli.policy import load_policy_text
from contrast.kuberesource import imagestore
from contrast.kuberesource.release import INITIALIZER_IMAGE
from tests.generate.conftest import GenerateWorkspace
from tests.generate.test_generate import EMULATED
from tests.local.kata_shim import create_container_request

# A Deployment with the how-to's annotation where it puts it (the pod template's metadata).
HOW_TO = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
      annotations:
        contrast.edgeless.systems/image-store-size: 250Gi
    spec:
      runtimeClassName: contrast-cc
      containers:
      - name: web
        image: ghcr.io/example/frontend:1.4.2
"""
# The how-to's "Manual image store setup": its sidecar and volume, verbatim but for the image
# (one of the test layout's), on a Pod that disables the injected store as the how-to says.
MANUAL = """\
apiVersion: v1
kind: Pod
metadata:
  name: manual
  annotations:
    contrast.edgeless.systems/image-store-size: "0"
spec:
  runtimeClassName: contrast-cc
  initContainers:
    - image: "ghcr.io/example/guestbook:3.1"
      command:
        - /usr/local/bin/bash
        - "-c"
        - sleep infinity
      name: my-image-store
      resources:
        limits:
          memory: 50Mi
        requests:
          memory: 50Mi
      restartPolicy: Always
      securityContext:
        privileged: true
      volumeDevices:
        - devicePath: /dev/image_store
          name: image-store
  containers:
    - name: app
      image: ghcr.io/example/ledger:2.0.0
  volumes:
    - ephemeral:
        volumeClaimTemplate:
          spec:
            accessModes:
              - ReadWriteOnce
            resources:
              requests:
                storage: 10Gi
            volumeMode: Block
      name: image-store
"""
DEVICE = {"id": "", "type_": "blk", "vm_path": "/dev/vdb", "container_path": "/dev/image_store",
          "options": []}  # fmt: skip
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _generate(workspace: GenerateWorkspace, text: str, *flags: str, name: str = "web.yml") -> int:
    if not (workspace.resources / "coordinator.yml").exists():
        workspace.add_coordinator("emulated-snp")
    (workspace.resources / name).write_text(text)
    return workspace.generate(*EMULATED, *flags, str(workspace.resources))


def _pod_spec(document: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = document["spec"]
    return spec["template"]["spec"] if "template" in spec else spec


def _policy(path: Path, pod: str) -> dict[str, Any]:
    text = load_policy_text(path.read_text(), pod)
    data: dict[str, Any] = json.loads(text[text.index("policy_data := ") + 15 :])
    return data


def _request(policy: dict[str, Any], name: str, args: list[str], privileged: bool) -> Any:
    entry = next(
        e
        for e in policy["containers"]
        if e["OCI"]["Annotations"].get("io.kubernetes.cri.container-name") == name
    )
    caps = policy["common"]["privileged_caps" if privileged else "default_caps"]
    spec = {
        "process": {
            "args": args,
            "env": [PATH_ENV, "HOSTNAME=web-0"],
            "cwd": "/" if name == imagestore.CONTAINER else "/app",
            "user": {"uid": 0, "gid": 0, "additionalGids": [0]},
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        }
    }
    return create_container_request(entry, spec, container=name, sandbox="web-0")


def _verdict(path: Path, pod: str, request: Any, tmp_path: Path) -> tuple[bool, str]:
    """`policy explain`'s verdict and account (what the agent's log would say)."""
    request_file = tmp_path / "request.json"
    request_file.write_text(json.dumps(request))
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["policy", "explain", "--policy", str(path), "--pod", pod, "--name",
                     "CreateContainerRequest", "--request", str(request_file)])  # fmt: skip
    return code == 0, buffer.getvalue()


def test_the_how_to_pod_gets_the_sidecar_and_volume_of_its_size(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _generate(workspace, HOW_TO, "--inject-image-store") == 0, capsys.readouterr().err
    spec = _pod_spec(workspace.documents("web.yml")[0])
    names = [c["name"] for c in spec["initContainers"]]
    assert names[0] == "pvc-holder"
    assert "contrast-initializer" in names
    assert spec["initContainers"][0] == {
        "name": "pvc-holder",
        "image": INITIALIZER_IMAGE,
        "command": ["/usr/bin/python3.11", "-c",
                    "import signal; signal.sigwait({signal.SIGTERM, signal.SIGINT})"],
        "restartPolicy": "Always",
        "securityContext": {"privileged": True},
        "resources": {"limits": {"memory": "50Mi"}, "requests": {"memory": "50Mi"}},
        "volumeDevices": [{"devicePath": "/dev/image_store", "name": "image-store"}],
    }  # fmt: skip
    assert spec["volumes"][-1] == {
        "name": "image-store",
        "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "250Gi"}},
            "volumeMode": "Block",
        }}},
    }  # fmt: skip
    # As in the original, every confidential pod gets one: the Coordinator too, at 10Gi.
    coordinator = next(
        d for d in workspace.documents("coordinator.yml") if d.get("kind") == "StatefulSet"
    )
    coordinator_spec = _pod_spec(coordinator)
    assert coordinator_spec["initContainers"][0]["name"] == "pvc-holder"
    storage = coordinator_spec["volumes"][-1]["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert storage["resources"]["requests"]["storage"] == "10Gi"
    capsys.readouterr()


def test_the_policy_admits_the_holder_and_nothing_wider(
    workspace: GenerateWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _generate(workspace, HOW_TO, "--inject-image-store") == 0, capsys.readouterr().err
    app = workspace.resources / "web.yml"
    policy = _policy(app, "web")
    holder = list(imagestore.container()["command"])
    good = _request(policy, "pvc-holder", holder, privileged=True)
    good["devices"] = [DEVICE]
    allowed, account = _verdict(app, "web", good, tmp_path)
    assert allowed, account

    elsewhere = {**good, "devices": [{**DEVICE, "container_path": "/dev/vdb"}]}
    assert not _verdict(app, "web", elsewhere, tmp_path)[0]
    second = {**DEVICE, "vm_path": "/dev/vdc", "container_path": "/dev/sda"}
    two = {**good, "devices": [DEVICE, second]}
    assert "devices: policy allows 1, request has 2" in _verdict(app, "web", two, tmp_path)[1]
    shell = _request(policy, "pvc-holder", ["/bin/sh", "-c", "sleep inf"], privileged=True)
    shell["devices"] = [DEVICE]
    assert not _verdict(app, "web", shell, tmp_path)[0]
    unprivileged = _request(policy, "pvc-holder", holder, privileged=False)
    unprivileged["devices"] = [DEVICE]
    assert not _verdict(app, "web", unprivileged, tmp_path)[0]
    web = _request(policy, "web", ["/usr/bin/frontend"], privileged=False)
    allowed, account = _verdict(app, "web", web, tmp_path)
    assert allowed, account
    web["devices"] = [DEVICE]
    assert "devices: policy allows 0, request has 1" in _verdict(app, "web", web, tmp_path)[1]
    capsys.readouterr()


def test_the_store_changes_the_policy_hash_and_a_run_without_the_flag_undoes_it(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    # The annotation is in the policy (as every pod annotation), so compare at one size.
    five = HOW_TO.replace("image-store-size: 250Gi", "image-store-size: 5Gi")
    assert _generate(workspace, five) == 0, capsys.readouterr().err
    app = workspace.resources / "web.yml"
    plain, plain_manifest = app.read_bytes(), workspace.manifest()["Policies"]
    assert "pvc-holder" not in app.read_text()
    assert _generate(workspace, HOW_TO, "--inject-image-store") == 0
    assert set(workspace.manifest()["Policies"]).isdisjoint(plain_manifest)
    # Another size takes effect on a re-run (the original kept the first one).
    app.write_text(app.read_text().replace("image-store-size: 250Gi", "image-store-size: 5Gi"))
    assert _generate(workspace, app.read_text(), "--inject-image-store") == 0
    spec = _pod_spec(workspace.documents("web.yml")[0])
    store = next(v for v in spec["volumes"] if v["name"] == "image-store")
    claim = store["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["resources"] == {"requests": {"storage": "5Gi"}}
    assert [c["name"] for c in spec["initContainers"]].count("pvc-holder") == 1
    # Without the flag: the bytes of a run that never had it (the annotation at 5Gi aside).
    assert _generate(workspace, app.read_text()) == 0
    assert app.read_bytes() == plain
    assert workspace.manifest()["Policies"] == plain_manifest
    capsys.readouterr()


def test_zero_disables_it_for_the_pod_and_removes_an_earlier_one(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _generate(workspace, HOW_TO, "--inject-image-store") == 0
    app = workspace.resources / "web.yml"
    app.write_text(app.read_text().replace("image-store-size: 250Gi", 'image-store-size: "0"'))
    assert _generate(workspace, app.read_text(), "--inject-image-store") == 0
    spec = _pod_spec(workspace.documents("web.yml")[0])
    assert "pvc-holder" not in [c["name"] for c in spec["initContainers"]]
    assert "image-store" not in [v["name"] for v in spec["volumes"]]
    capsys.readouterr()


def test_the_manual_setup_is_kept_with_zero_and_refused_without(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _generate(workspace, MANUAL, "--inject-image-store", name="manual.yml") == 0, (
        capsys.readouterr().err
    )
    spec = _pod_spec(workspace.documents("manual.yml")[0])
    assert spec["initContainers"][0]["name"] == "contrast-initializer"
    assert "pvc-holder" not in [c["name"] for c in spec["initContainers"]]
    assert [v["name"] for v in spec["volumes"]].count("image-store") == 1
    manual = workspace.resources / "manual.yml"
    manual.write_text(MANUAL.replace('    contrast.edgeless.systems/image-store-size: "0"\n', ""))
    before = workspace.snapshot()
    capsys.readouterr()
    assert workspace.generate(*EMULATED, "--inject-image-store", str(workspace.resources)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err == (
        f"contrast: {manual}: Pod/manual: container 'my-image-store' already binds"
        " /dev/image_store (a manual image store), and --inject-image-store would add another"
        ' (annotate the pod contrast.edgeless.systems/image-store-size: "0" to keep the manual'
        " one)\n"
    )
    assert workspace.snapshot() == before


def test_an_annotation_without_the_flag_is_warned_about(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert _generate(workspace, HOW_TO) == 0
    err = capsys.readouterr().err
    assert (
        "web.yml: Deployment/web: contrast.edgeless.systems/image-store-size does nothing"
        " without --inject-image-store" in err
    ), err


@pytest.mark.parametrize(
    ("replacement", "said"),
    [
        ("image-store-sise: 250Gi", "unknown annotation contrast.edgeless.systems/image-store-sise"
         " (did you mean contrast.edgeless.systems/image-store-size?)"),
        ("image-store-size: 250GiB", "annotation contrast.edgeless.systems/image-store-size="
         "'250GiB' is not a Kubernetes quantity (accepted: 0, or a size such as 250Gi (a"
         " quantity))"),
    ],
    ids=["misspelt", "malformed"],
)  # fmt: skip
def test_a_misspelt_or_malformed_annotation_fails_in_one_line(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str], replacement: str, said: str
) -> None:
    workspace.add_coordinator("emulated-snp")
    capsys.readouterr()
    text = HOW_TO.replace("image-store-size: 250Gi", replacement)
    assert _generate(workspace, text, "--inject-image-store") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.endswith(f"web.yml: Deployment/default/web: {said}\n"), err
    assert (workspace.resources / "web.yml").read_text() == text
