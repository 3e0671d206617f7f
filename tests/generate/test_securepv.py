"""`generate` on the original's encrypted-storage YAML: the injected Initializer and its policy.

The policy is generated from the injected pod, so the check is that it admits the CreateContainer
request the agent would get for that Initializer (its command and env on the image, privileged
capabilities, the block device at /dev/csi0) and nothing wider: another device, another
CRYPTSETUP_DEVICE, or the app container asking for the device are denied.
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
from tests.generate.conftest import GenerateWorkspace
from tests.generate.test_generate import EMULATED
from tests.local.kata_shim import create_container_request

# The how-to's StatefulSet (docs/howto/encrypted-storage), completed with a name, a selector and
# an image; the annotation where the how-to puts it, on the pod template.
HOW_TO = """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
      annotations:
        contrast.edgeless.systems/secure-pv: device-name:mount-name
    spec:
      runtimeClassName: contrast-cc
      containers:
      - name: db
        image: ghcr.io/example/ledger:2.0.0
        volumeMounts:
        - mountPath: /mount/path
          mountPropagation: HostToContainer
          name: mount-name
      volumes:
      - emptyDir:
          medium: Memory
        name: mount-name
  volumeClaimTemplates:
  - apiVersion: v1
    kind: PersistentVolumeClaim
    metadata:
      name: device-name
    spec:
      accessModes:
      - ReadWriteOnce
      resources:
        requests:
          storage: 1Gi
      volumeMode: Block
"""
# The Vault example and the secrets page put it on the StatefulSet's own metadata.
ANNOTATION = "contrast.edgeless.systems/secure-pv: device-name:mount-name\n"
ON_METADATA = HOW_TO.replace(
    "metadata:\n  name: db\n", f"metadata:\n  name: db\n  annotations:\n    {ANNOTATION}"
).replace(f"      annotations:\n        {ANNOTATION}", "")
DEVICE = {"id": "", "type_": "blk", "vm_path": "/dev/vdb", "container_path": "/dev/csi0",
          "options": []}  # fmt: skip


def _generated(workspace: GenerateWorkspace, text: str) -> Path:
    workspace.add_coordinator("emulated-snp")
    app = workspace.resources / "db.yml"
    app.write_text(text)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    return app


def _policy(app: Path) -> dict[str, Any]:
    text = load_policy_text(app.read_text(), "db")
    data: dict[str, Any] = json.loads(text[text.index("policy_data := ") + 15 :])
    return data


def _entry(policy: dict[str, Any], name: str) -> dict[str, Any]:
    return next(
        e
        for e in policy["containers"]
        if e["OCI"]["Annotations"].get("io.kubernetes.cri.container-name") == name
    )


def _request(policy: dict[str, Any], name: str, args: list[str], env: list[str]) -> dict[str, Any]:
    """What the agent gets for container `name`, from a runc spec written out by hand."""
    privileged = policy["common"]["privileged_caps"]
    caps = privileged if name == "contrast-initializer" else policy["common"]["default_caps"]
    spec = {
        "process": {
            "args": args,
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOSTNAME=db-0", *env],
            "cwd": "/" if name == "contrast-initializer" else "/app",
            "user": {"uid": 0, "gid": 0, "additionalGids": [0]},
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        }
    }  # fmt: skip
    return create_container_request(_entry(policy, name), spec, container=name, sandbox="db-0")


def _allowed(app: Path, request: dict[str, Any], tmp_path: Path) -> bool:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    arguments = ["policy", "evaluate", "--policy", str(app), "--pod", "db",
                 "--name", "CreateContainerRequest", "--request", str(path)]  # fmt: skip
    return main(arguments) == 0


def _why_denied(app: Path, request: dict[str, Any], tmp_path: Path) -> str:
    """`policy explain`'s account of a denial (what the agent's log would say)."""
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["policy", "explain", "--policy", str(app), "--pod", "db",
                     "--name", "CreateContainerRequest", "--request", str(path)])  # fmt: skip
    assert code != 0
    return buffer.getvalue()


INITIALIZER_ENV = [
    "COORDINATOR_HOST=coordinator-ready.default",
    "CONTRAST_SERVICE_MESH_DISABLED=true",
    "CRYPTSETUP_DEVICE=/dev/csi0",
]


@pytest.mark.parametrize("text", [HOW_TO, ON_METADATA], ids=["how-to", "on metadata"])
def test_the_policy_admits_the_injected_initializer_and_nothing_wider(
    workspace: GenerateWorkspace,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
) -> None:
    app = _generated(workspace, text)
    document = workspace.documents("db.yml")[0]
    initializer = document["spec"]["template"]["spec"]["initContainers"][0]
    assert initializer["name"] == "contrast-initializer"
    assert initializer["volumeDevices"] == [{"name": "device-name", "devicePath": "/dev/csi0"}]
    assert initializer["securityContext"]["privileged"] is True
    policy = _policy(app)
    args = ["contrast", "initializer"]
    good = _request(policy, "contrast-initializer", args, INITIALIZER_ENV)
    good["devices"] = [DEVICE]
    assert _allowed(app, good, tmp_path)

    # The allowed request with only the device's path changed.
    other_device = {**good, "devices": [{**DEVICE, "container_path": "/dev/csi1"}]}
    assert not _allowed(app, other_device, tmp_path)
    other_env = _request(policy, "contrast-initializer", args,
                         [*INITIALIZER_ENV[:2], "CRYPTSETUP_DEVICE=/dev/sda"])  # fmt: skip
    other_env["devices"] = [DEVICE]
    assert '"CRYPTSETUP_DEVICE=/dev/sda" is not allowed by the policy' in _why_denied(
        app, other_env, tmp_path
    )
    app_request = _request(policy, "db", ["/usr/bin/ledger"], [])
    assert _allowed(app, app_request, tmp_path)
    app_request["devices"] = [DEVICE]
    assert "devices: policy allows 0, request has 1" in _why_denied(app, app_request, tmp_path)
    capsys.readouterr()


def test_a_misspelt_secure_pv_fails_in_one_line(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace.add_coordinator("emulated-snp")
    app = workspace.resources / "db.yml"
    app.write_text(HOW_TO.replace("secure-pv:", "secure-pvc:"))
    capsys.readouterr()
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.endswith(
        "db.yml: StatefulSet/default/db: unknown annotation contrast.edgeless.systems/secure-pvc"
        " (did you mean contrast.edgeless.systems/secure-pv?)\n"
    )
    assert app.read_text() == HOW_TO.replace("secure-pv:", "secure-pvc:")
