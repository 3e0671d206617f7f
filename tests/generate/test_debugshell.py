"""`generate --insecure-enable-debug-shell-access`: the sidecar, the initdata flag, the warnings.

The flag must change what is attested (the initdata, so the policy hash in the manifest), be
loud (one warning per pod in `generate`, one per policy in `verify`), and go away without a
trace when `generate` runs again without it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from contrast.cli.policy import load_policy_text
from contrast.client.operations import debug_warnings
from contrast.kuberesource import debugshell
from contrast.manifest.model import Manifest
from contrast.policy.initdata import (
    ANNOTATION,
    Initdata,
    PolicyEncoder,
    decode_annotation,
    encode_policy,
    policy_hash,
)
from tests.generate.conftest import GenerateWorkspace
from tests.generate.test_generate import EMULATED, prepared

FLAG = "--insecure-enable-debug-shell-access"
RESOURCES = ("app.yml", "coordinator.yml")


def _pods(workspace: GenerateWorkspace) -> list[dict[str, Any]]:
    return [
        d
        for name in RESOURCES
        for d in workspace.documents(name)
        if d.get("kind") in ("Deployment", "StatefulSet")
    ]


def _initdata(document: dict[str, Any]) -> bytes:
    return decode_annotation(document["spec"]["template"]["metadata"]["annotations"][ANNOTATION])


def _texts(workspace: GenerateWorkspace) -> dict[str, bytes]:
    return {name: (workspace.resources / name).read_bytes() for name in RESOURCES}


def test_the_flag_adds_the_sidecar_and_the_attested_flag_and_leaves_no_trace(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    prepared(workspace)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    plain = _texts(workspace)
    plain_hashes = set(workspace.manifest()["Policies"])
    capsys.readouterr()

    assert workspace.generate(*EMULATED, FLAG, str(workspace.resources)) == 0
    err = capsys.readouterr().err
    pods = _pods(workspace)
    assert len(pods) == 3  # web, backend, the Coordinator
    for pod in pods:
        init = pod["spec"]["template"]["spec"]["initContainers"]
        assert init[-1]["name"] == "contrast-debug-shell"
        assert init[-1]["restartPolicy"] == "Always"
        toml = _initdata(pod)
        assert b"\n\"contrast.insecure-debug\" = 'true'\n" in toml
        assert Initdata.from_toml(toml).insecure_debug
        assert policy_hash(toml).hex() in workspace.manifest()["Policies"]
    # Every policy hash changed: the attestation tells a debug pod from the same pod without.
    assert set(workspace.manifest()["Policies"]).isdisjoint(plain_hashes)
    warnings = [line for line in err.splitlines() if "insecure debug shell access" in line]
    assert len(warnings) == 3, err
    # The policy describes the sidecar as injected (its command on the Initializer's image).
    text = load_policy_text((workspace.resources / "app.yml").read_text(), "web")
    data = json.loads(text[text.index("policy_data := ") + 15 :])
    names = {c["OCI"]["Annotations"].get("io.kubernetes.cri.container-name"): c
             for c in data["containers"]}  # fmt: skip
    assert names["contrast-debug-shell"]["OCI"]["Process"]["Args"] == list(debugshell.HOLD)

    # Without the flag again: the same bytes as a run that never had it.
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    assert _texts(workspace) == plain
    assert set(workspace.manifest()["Policies"]) == plain_hashes
    assert "insecure" not in capsys.readouterr().err


def test_verify_warns_for_each_debug_policy_of_the_active_manifest(
    workspace: GenerateWorkspace,
) -> None:
    prepared(workspace)
    assert workspace.generate(*EMULATED, FLAG, str(workspace.resources)) == 0
    debug_manifest = (workspace.root / "manifest.json").read_bytes()
    debug_initdata = [_initdata(pod) for pod in _pods(workspace)]
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    plain_manifest = (workspace.root / "manifest.json").read_bytes()
    plain_initdata = [_initdata(pod) for pod in _pods(workspace)]

    # What `verify` holds: the active manifest and the documents GetManifests sent.
    documents = debug_initdata + plain_initdata
    warnings = debug_warnings(Manifest.from_bytes(debug_manifest), documents)
    assert len(warnings) == 3
    assert all(w.startswith("INSECURE: policy ") for w in warnings)
    assert any("apps/v1/Deployment/default/web" in w for w in warnings)
    # A debug policy that is not the active manifest's is not warned about.
    assert debug_warnings(Manifest.from_bytes(plain_manifest), documents) == []


def test_the_encoders_shortcut_writes_the_flag_as_encoding_from_scratch() -> None:
    extra = {"contrast.insecure-debug": "true"}
    prefix = "package agent_policy\n\ndefault AllowRequestsFailingPolicy := false\n"
    policy = prefix + json.dumps({"containers": [{"name": "é"}]}, indent=2)
    encoder = PolicyEncoder(prefix, extra)
    encoded = encoder.encode(policy)
    assert encoded == encode_policy(policy, extra)
    assert Initdata.from_toml(encoded.toml).data == {**extra, "policy.rego": policy}
    # Without it, the bytes of every earlier release.
    assert PolicyEncoder(prefix).encode(policy) == encode_policy(policy)
    assert b"insecure" not in encode_policy(policy).toml
