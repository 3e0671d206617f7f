"""`contrast generate` as a command: stdin, workspace files, keys, failures that lose nothing."""

from __future__ import annotations

import io
import json
import re
import stat
import subprocess
import sys

import pytest
from ruamel.yaml import YAML

from contrast.cli.main import main
from contrast.client.workspace import generate_seedshare_owner_key
from contrast.manifest.defaults import MINIMUM_TCB_FIELDS
from contrast.policy.initdata import ANNOTATION, decode_annotation, policy_hash
from tests.generate.conftest import GenerateWorkspace
from tests.kuberesource.test_yamlbounds import DEEP, alias_bomb

EMULATED = ("--reference-values", "emulated-snp")


def prepared(workspace: GenerateWorkspace) -> GenerateWorkspace:
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("emulated-snp")
    return workspace


def test_keys_are_created_owner_only_and_never_replaced(workspace: GenerateWorkspace) -> None:
    prepared(workspace)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    keys = {name: workspace.root / name for name in ("workload-owner.pem", "seedshare-owner.pem")}
    for path in keys.values():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = {name: path.read_bytes() for name, path in keys.items()}
    manifest = workspace.manifest()
    assert len(manifest["WorkloadOwnerKeyDigests"]) == 1
    assert len(manifest["SeedshareOwnerPubKeys"]) == 1
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    assert {name: path.read_bytes() for name, path in keys.items()} == before


def test_a_seedshare_threshold_goes_into_the_manifest_only_above_one(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    prepared(workspace)
    workspace.root.mkdir(parents=True, exist_ok=True)
    keys = []
    for number in range(3):
        path = workspace.root / f"owner-{number}.pem"
        path.write_bytes(generate_seedshare_owner_key())
        keys += ["--add-seedshare-owner-key", str(path)]
    assert workspace.generate(*EMULATED, *keys, str(workspace.resources)) == 0
    assert "SeedshareThreshold" not in workspace.manifest()  # K = 1: the original's format
    assert (workspace.root / "workload-owner.pem").exists()  # its default is still made
    assert not (workspace.root / "seedshare-owner.pem").exists()  # named owners instead
    arguments = (*EMULATED, *keys, "--seedshare-threshold", "2", str(workspace.resources))
    assert workspace.generate(*arguments) == 0
    manifest = workspace.manifest()
    assert manifest["SeedshareThreshold"] == 2
    assert len(manifest["SeedshareOwnerPubKeys"]) == 3
    capsys.readouterr()
    before = (workspace.root / "manifest.json").read_bytes()
    arguments = (*EMULATED, *keys, "--seedshare-threshold", "4", str(workspace.resources))
    assert workspace.generate(*arguments) == 1
    err = capsys.readouterr().err
    assert "--seedshare-threshold 4 needs as many seed share owner keys, and there are 3" in err
    assert (workspace.root / "manifest.json").read_bytes() == before


def test_disable_updates_lists_no_owner(workspace: GenerateWorkspace) -> None:
    prepared(workspace)
    assert workspace.generate(*EMULATED, "--disable-updates", str(workspace.resources)) == 0
    assert workspace.manifest()["WorkloadOwnerKeyDigests"] == []
    assert not (workspace.root / "workload-owner.pem").exists()


def test_edited_rules_are_used_and_change_the_policy_hash(workspace: GenerateWorkspace) -> None:
    prepared(workspace)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    before = set(workspace.manifest()["Policies"])
    rules = workspace.root / "rules.rego"
    rules.write_text(rules.read_text() + "\n# reviewed by the platform team\n")
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    after = set(workspace.manifest()["Policies"])
    assert before.isdisjoint(after)
    assert len(after) == len(before)


def test_stdin_to_stdout(
    workspace: GenerateWorkspace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prepared(workspace)
    text = (workspace.resources / "app.yml").read_text()
    (workspace.resources / "app.yml").unlink()
    coordinator = workspace.resources / "coordinator.yml"
    monkeypatch.setattr(sys, "stdin", io.StringIO(text + "---\n" + coordinator.read_text()))
    assert workspace.generate(*EMULATED, "-") == 0
    captured = capsys.readouterr()
    documents = [d for d in YAML(typ="safe").load_all(captured.out) if d]
    assert [d["kind"] for d in documents] == [
        "Deployment",
        "Deployment",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "StatefulSet",
        "Service",
        "Service",
        "Service",
    ]
    annotations = documents[0]["spec"]["template"]["metadata"]["annotations"]
    hash_hex = policy_hash(decode_annotation(annotations[ANNOTATION])).hex()
    assert hash_hex in workspace.manifest()["Policies"]
    assert "confidential workloads" in captured.err  # the report stays off stdout
    assert coordinator.read_text().count(ANNOTATION) == 0  # files are not touched


def test_skip_initializer(workspace: GenerateWorkspace) -> None:
    workspace.add_example("kustomize-app")
    workspace.add_coordinator("emulated-snp")
    assert workspace.generate(*EMULATED, "--skip-initializer", str(workspace.resources)) == 0
    (deployment,) = [d for d in workspace.documents("build.yml") if d["kind"] == "Deployment"]
    assert "initContainers" not in deployment["spec"]["template"]["spec"]


def _assert_refused_and_unchanged(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str], message: str
) -> str:
    before = workspace.snapshot()
    capsys.readouterr()
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 1
    err = capsys.readouterr().err
    assert err.startswith("contrast: ")
    assert err.count("\n") == 1
    assert message in err
    assert workspace.snapshot() == before
    return err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda text: text.replace(
                "image: ghcr.io/example/frontend:1.4.2", "image: 127.0.0.1:9/example/missing:1"
            ),
            "127.0.0.1:9/example/missing:1",
        ),
        (lambda text: text + "---\nkind: [unclosed\n", "app.yml"),
        (
            lambda text: text.replace(
                "runtimeClassName: contrast-cc", "runtimeClassName: contrast-cc-metal-qemu-sev"
            ),
            "contrast-cc-metal-qemu-sev",
        ),
        (
            lambda text: text.replace(
                "backend#127.0.0.2:4001#backend.default:4001", "backend#10.0.0.1:4001#backend:4001"
            ),
            "127.0.0.0/8",
        ),
        (lambda text: text + "---\n" + alias_bomb(9), "aliases expand"),
        (lambda text: text + "---\n" + DEEP, "nested more deeply"),
        (
            lambda text: text.replace("memory: 128Mi", "memory: [128Mi]", 1),
            "Deployment/web: spec.template.spec.containers[0].resources.limits.memory: ",
        ),
        (
            lambda text: text.replace(
                "servicemesh-ingress:", "servicemesh-admin-interface-port: 9901\n        x:", 1
            ),
            "annotations.contrast.edgeless.systems/servicemesh-admin-interface-port: 9901 is not of"
            " type 'string'",
        ),
        (
            lambda text: text.replace(
                "      containers:\n", "      imagePullSecrets: [null]\n      containers:\n", 1
            ),
            "Deployment/web: spec.template.spec.imagePullSecrets[0]: a list entry is null",
        ),
    ],
    ids=[
        "unknown image",
        "broken YAML",
        "unknown runtime class",
        "egress outside loopback",
        "alias bomb",
        "deep nesting",
        "field of another type",
        "annotation that is a number",
        "null list entry",
    ],
)
def test_failures_are_one_line_and_change_nothing(
    workspace: GenerateWorkspace,
    capsys: pytest.CaptureFixture[str],
    edit: object,
    message: str,
) -> None:
    prepared(workspace)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    app = workspace.resources / "app.yml"
    assert callable(edit)
    app.write_text(edit(app.read_text()))
    err = _assert_refused_and_unchanged(workspace, capsys, message)
    assert "Traceback" not in err


def test_without_a_coordinator_nothing_is_written(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace.add_example("sidecar-tls")
    before = (workspace.resources / "app.yml").read_bytes()
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 1
    assert "no Coordinator" in capsys.readouterr().err
    assert (workspace.resources / "app.yml").read_bytes() == before
    assert not (workspace.root / "manifest.json").exists()
    # The new text was staged beside app.yml before the Coordinator was found missing: gone.
    assert [path.name for path in workspace.resources.iterdir()] == ["app.yml"]


def test_contrast_cc_needs_a_platform(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    prepared(workspace)
    assert workspace.generate(str(workspace.resources)) == 1
    assert "--reference-values" in capsys.readouterr().err


def test_existing_reference_values_are_kept(workspace: GenerateWorkspace) -> None:
    prepared(workspace)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    path = workspace.root / "manifest.json"
    document = json.loads(path.read_text())
    document["ReferenceValues"]["snp"][0]["MinimumMitigationVector"] = 7  # an operator's edit
    path.write_text(json.dumps(document, indent=2) + "\n")
    assert (
        main(
            [
                "generate",
                "--workspace-dir",
                str(workspace.root),
                "--oci-layout",
                str(workspace.layout),
                *EMULATED,
                str(workspace.resources),
            ]
        )
        == 0
    )
    assert json.loads(path.read_text())["ReferenceValues"]["snp"][0]["MinimumMitigationVector"] == 7


def test_set_refuses_expected_missing_values_until_filled_in(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace.add_example("gpu")
    workspace.add_coordinator("metal-qemu-snp")
    # As a release build writes them: MinimumTCB is left for the operator (null).
    values = json.loads(workspace.reference_values.read_text())
    for entries in values.values():
        for entry in entries.get("snp", []):
            entry["MinimumTCB"] = dict.fromkeys(MINIMUM_TCB_FIELDS)
    workspace.reference_values.write_text(json.dumps(values))
    assert workspace.generate("--reference-values", "metal-qemu-snp", str(workspace.resources)) == 0
    capsys.readouterr()
    set_command = ["set", "-c", "127.0.0.1:9", "--workspace-dir", str(workspace.root)]
    assert main([*set_command, str(workspace.resources)]) == 1
    err = capsys.readouterr().err
    assert "expected-missing" in err
    assert "MinimumTCB.BootloaderVersion" in err


def _move_annotations_to_the_deployment(text: str) -> str:
    """The sidecar-tls example with its annotations where the deployment guide puts them."""
    documents = list(YAML(typ="safe").load_all(text))
    for document in documents:
        template = document["spec"]["template"]["metadata"]
        document["metadata"]["annotations"] = template.pop("annotations")
    documents[1]["metadata"]["annotations"]["contrast.edgeless.systems/workload-secret-id"] = (
        "shop/backend"
    )
    buffer = io.StringIO()
    YAML(typ="safe").dump_all(documents, buffer)
    return buffer.getvalue()


def test_annotations_on_the_workload_metadata_work_as_written(
    workspace: GenerateWorkspace,
) -> None:
    prepared(workspace)
    app = workspace.resources / "app.yml"
    app.write_text(_move_annotations_to_the_deployment(app.read_text()))
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    web, backend = workspace.documents("app.yml")
    for deployment in (web, backend):
        init = deployment["spec"]["template"]["spec"]["initContainers"]
        assert [c["name"] for c in init] == ["contrast-initializer", "contrast-service-mesh"]
    sidecar_env = {
        e["name"]: e["value"] for e in web["spec"]["template"]["spec"]["initContainers"][1]["env"]
    }
    assert sidecar_env["CONTRAST_INGRESS_PROXY_CONFIG"] == "main#8001#false##metrics#8080#true"
    secret_ids = {
        p["SANs"][0]: p.get("WorkloadSecretID") for p in workspace.manifest()["Policies"].values()
    }
    assert secret_ids["backend"] == "shop/backend"
    assert secret_ids["web"] == "apps/v1/Deployment/default/web"


def test_one_annotation_with_two_values_changes_nothing(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    prepared(workspace)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    app = workspace.resources / "app.yml"
    app.write_text(
        app.read_text().replace(
            "metadata:\n  name: web\n",
            "metadata:\n  name: web\n  annotations:\n"
            '    contrast.edgeless.systems/servicemesh-ingress: "main#8443#false"\n',
        )
    )
    err = _assert_refused_and_unchanged(
        workspace, capsys, "'main#8443#false' in metadata.annotations"
    )
    assert "spec.template.metadata.annotations" in err


WORKSPACE_FILES = {
    "layers-cache.json",
    "manifest.json",
    "policy-cache.json",
    "rules.rego",
    "schema-cache.json",
    "seedshare-owner.pem",
    "settings.json",
    "workload-owner.pem",
    "yaml-cache.txt",
}


def _top_level_files(workspace: GenerateWorkspace) -> set[str]:
    return {path.name for path in workspace.root.iterdir() if path.is_file()}


def test_generate_leaves_no_stray_files(workspace: GenerateWorkspace) -> None:
    prepared(workspace)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    assert _top_level_files(workspace) == WORKSPACE_FILES  # no layers-cache.json.lock
    assert {p.name for p in workspace.resources.iterdir()} == {"app.yml", "coordinator.yml"}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"Manifest": {"Policies": {}}}, "Manifest"),
        ({"ReferenceValues": []}, "ReferenceValues"),
        ({"ReferenceValues": {"snp": "Genoa"}}, "ReferenceValues.snp"),
        ({"ReferenceValues": {"sev": [{}]}}, "ReferenceValues.sev"),
        ({"Policies": ["web"]}, "Policies"),
        ({"WorkloadOwnerKeyDigests": "ab"}, "WorkloadOwnerKeyDigests"),
        ("[1, 2]", "invalid manifest: not a JSON object"),
        ('{"Policies": ', "is not JSON"),
        ("[" * 100_000 + "]" * 100_000, "nests deeper"),
    ],
    ids=[
        "unknown field",
        "values a list",
        "entries a string",
        "unknown TEE",
        "policies",
        "keys",
        "an array",
        "malformed",
        "deep nesting",
    ],
)
def test_a_manifest_of_the_wrong_shape_is_refused_and_kept(
    workspace: GenerateWorkspace,
    capsys: pytest.CaptureFixture[str],
    document: dict[str, object] | str,
    message: str,
) -> None:
    prepared(workspace)
    text = document if isinstance(document, str) else json.dumps(document)
    (workspace.root / "manifest.json").write_text(text)
    err = _assert_refused_and_unchanged(workspace, capsys, message)
    assert "manifest.json" in err
    # Refused before anything was written: no rules, settings or keys appeared.
    assert _top_level_files(workspace) == {"manifest.json"}
    assert not (workspace.root / "emulated-tee").exists()


def test_a_manifest_that_passed_is_checked_again_only_when_a_byte_changes(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """The manifest check is remembered (schema-cache.json): a re-run does not import pydantic."""
    prepared(workspace)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    arguments = [
        "generate",
        "--workspace-dir",
        str(workspace.root),
        "--oci-layout",
        str(workspace.layout),
        "--reference-values-file",
        str(workspace.reference_values),
        *EMULATED,
        str(workspace.resources),
    ]
    # Nor the rules' parser, nor PyYAML: the rules passed, the files are remembered (yamlmemo);
    # nor shamir-mnemonic: no seed is split.
    unused = ("pydantic", "regorus", "yaml", "shamir_mnemonic")
    code = (
        "import sys; from contrast.cli.main import main;"
        f" code = main({arguments!r});"
        f" print(code, *(m in sys.modules for m in {unused!r}))"
    )
    rerun = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True
    )
    assert rerun.stdout.split()[-5:] == ["0", *["False"] * len(unused)], rerun.stderr
    manifest = workspace.manifest()
    manifest["Policy"] = manifest.pop("Policies")  # a typo: not a manifest any more
    (workspace.root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    _assert_refused_and_unchanged(workspace, capsys, "Policy: not a field of the manifest")


def test_a_manifest_with_only_reference_values_is_a_starting_point(
    workspace: GenerateWorkspace,
) -> None:
    # The README's promise: an operator may write the reference values before the first run.
    prepared(workspace)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    values = workspace.manifest()["ReferenceValues"]
    (workspace.root / "manifest.json").write_text(json.dumps({"ReferenceValues": values}))
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    assert workspace.manifest()["ReferenceValues"] == values
    assert len(workspace.manifest()["Policies"]) == 3


@pytest.mark.parametrize(
    ("edit", "location"),
    [
        (lambda rules: rules + "\nbroken_rule if {\n    x := 1\n", ":"),
        (lambda rules: rules.replace("package agent_policy", "package other", 1), "package"),
    ],
    ids=["unclosed brace", "wrong package"],
)
def test_invalid_rules_are_refused_with_their_location(
    workspace: GenerateWorkspace,
    capsys: pytest.CaptureFixture[str],
    edit: object,
    location: str,
) -> None:
    prepared(workspace)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    rules = workspace.root / "rules.rego"
    assert callable(edit)
    rules.write_text(edit(rules.read_text()))
    err = _assert_refused_and_unchanged(workspace, capsys, "rules.rego")
    if location == ":":
        lines = rules.read_text().count("\n") + 1
        assert re.search(rf"rules\.rego:{lines}:\d+: ", err), err
    else:
        assert "package other" in err


def test_documents_that_are_no_kubernetes_objects_are_warned_about(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    prepared(workspace)
    extra = workspace.resources / "odd.yml"
    extra.write_text("- a\n- list\n---\njust a scalar\n---\n# only a comment\n")
    capsys.readouterr()
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    err = capsys.readouterr().err
    assert f"warning: {extra}: document 1: a list, not a Kubernetes object" in err
    assert f"warning: {extra}: document 2: a string, not a Kubernetes object" in err
    assert "document 3" not in err  # empty documents are fine
    assert extra.read_text() == "- a\n- list\n---\njust a scalar\n---\n# only a comment\n"
