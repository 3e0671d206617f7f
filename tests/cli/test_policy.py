"""`contrast policy evaluate` and `explain` end to end through the CLI's entry point."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from contrast.cli.main import main
from contrast.policy.initdata import ANNOTATION, Initdata, encode_annotation
from tests.kuberesource.test_yamlbounds import DEEP, SELF_REFERENCE, alias_bomb

KATA = Path(__file__).parents[2].parent / "shared" / "testdata" / "kata-policy"

POLICY = """package agent_policy

import future.keywords.if
import future.keywords.in

default CreateContainerRequest := {"allowed": false}
default RemoveContainerRequest := false
default UpdateRoutesRequest := false
default ExecProcessRequest := false

CreateContainerRequest := {"allowed": true, "ops": ops} if {
    input.OCI.Process.Args in [c.OCI.Process.Args | some c in policy_data.containers]
    ops := [{"op": "add", "path": concat("", ["/pstate/", input.container_id]), "value": 0}]
}

CreateContainerRequest := {"allowed": false} if {
    not input.OCI.Process.Args in [c.OCI.Process.Args | some c in policy_data.containers]
    print("CreateContainerRequest: Args not allowed:", input.OCI.Process.Args)
}

RemoveContainerRequest := {"allowed": true, "ops": ops} if {
    ops := [{"op": "remove", "path": concat("", ["/pstate/", input.container_id])}]
}

UpdateRoutesRequest if {
    every route in input.routes.Routes {
        route.device != "lo"
        not regex.match(`^(?:0{0,4}:){0,7}0{0,3}1$`, route.source)
        not regex.match(`^127\\.`, route.source)
    }
}

policy_data := {
    "containers": [{"OCI": {"Process": {"Args": ["/pause"], "Cwd": "/"}}}],
    "common": {},
    "request_defaults": {},
}
"""

CREATE = {"container_id": "c1", "OCI": {"Process": {"Args": ["/pause"], "Cwd": "/"}}}
CREATE_SH = {"container_id": "c2", "OCI": {"Process": {"Args": ["sh"], "Cwd": "/"}}}


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.rego"
    path.write_text(POLICY)
    return path


def _write(tmp_path: Path, name: str, content: object) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["policy", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("contrast: ")
    return lines[0]


def test_kata_testcases_report_verdicts_against_expectations(
    capsys: pytest.CaptureFixture[str], policy_file: Path
) -> None:
    requests = KATA / "updateroutes" / "testcases.json"
    code, out, _ = _run(
        capsys, "evaluate", "--policy", str(policy_file), "--request", str(requests)
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "1: UpdateRoutesRequest (compliant routes): allowed, as expected"
    assert lines[1] == "2: UpdateRoutesRequest (forbidden device): denied, as expected"
    assert lines[-1] == "6 requests: 1 allowed, 5 denied; 6 of 6 as expected"


def test_a_verdict_against_the_expectation_fails(
    capsys: pytest.CaptureFixture[str], policy_file: Path, tmp_path: Path
) -> None:
    cases = json.loads((KATA / "updateroutes" / "testcases.json").read_text())
    cases[1]["allowed"] = True
    requests = _write(tmp_path, "cases.json", cases)
    code, out, _ = _run(
        capsys, "evaluate", "--policy", str(policy_file), "--request", str(requests)
    )
    assert code == 3
    assert "2: UpdateRoutesRequest (forbidden device): denied, NOT as expected" in out
    assert out.splitlines()[-1].endswith("5 of 6 as expected")


def test_state_is_kept_across_json_lines(
    capsys: pytest.CaptureFixture[str], policy_file: Path, tmp_path: Path
) -> None:
    trace = "\n".join(
        json.dumps(entry)
        for entry in (
            {"kind": "CreateContainerRequest", "request": CREATE},
            {"kind": "CreateContainerRequest", "request": {**CREATE, "container_id": "c3"}},
            {"kind": "RemoveContainerRequest", "request": {"container_id": "c1"}},
        )
    )
    requests = _write(tmp_path, "policy.jsonl", trace + "\n")
    code, out, _ = _run(
        capsys,
        "evaluate",
        "--policy",
        str(policy_file),
        "--request",
        str(requests),
        "--output",
        "json",
    )
    assert code == 0
    report = json.loads(out)
    assert [r["allowed"] for r in report["results"]] == [True, True, True]
    assert report["results"][0]["ops"] == [{"op": "add", "path": "/pstate/c1", "value": 0}]
    assert report["state"] == {"c3": 0}


def test_a_denial_exits_3_and_gives_the_first_reason(
    capsys: pytest.CaptureFixture[str], policy_file: Path, tmp_path: Path
) -> None:
    request = _write(tmp_path, "request.json", CREATE_SH)
    code, out, _ = _run(
        capsys,
        "evaluate",
        "--policy",
        str(policy_file),
        "--request",
        str(request),
        "--name",
        "CreateContainerRequest",
    )
    assert code == 3
    assert out.splitlines()[0].startswith("1: CreateContainerRequest: denied: ")
    assert 'Args not allowed: ["sh"]' in out


def test_a_failing_patch_exits_4_and_the_sequence_goes_on(
    capsys: pytest.CaptureFixture[str], policy_file: Path, tmp_path: Path
) -> None:
    requests = _write(
        tmp_path,
        "cases.json",
        [
            {"kind": "RemoveContainerRequest", "request": {"container_id": "nope"}},
            {"kind": "CreateContainerRequest", "request": CREATE},
        ],
    )
    code, out, _ = _run(
        capsys, "evaluate", "--policy", str(policy_file), "--request", str(requests)
    )
    assert code == 4
    lines = out.splitlines()
    assert lines[0].startswith("1: RemoveContainerRequest: error: ")
    assert "'nope' does not exist" in lines[0]
    assert lines[1] == "2: CreateContainerRequest: allowed"


def test_explain_names_the_differing_field(
    capsys: pytest.CaptureFixture[str], policy_file: Path, tmp_path: Path
) -> None:
    requests = _write(
        tmp_path,
        "cases.json",
        [
            {"kind": "CreateContainerRequest", "request": CREATE},
            {"kind": "CreateContainerRequest", "request": CREATE_SH},
        ],
    )
    code, out, _ = _run(capsys, "explain", "--policy", str(policy_file), "--request", str(requests))
    assert code == 3
    assert "1: CreateContainerRequest: allowed" in out
    assert "2: CreateContainerRequest: denied" in out
    assert re.search(
        r"policy says: agent_policy:\d+: CreateContainerRequest: Args not allowed", out
    )
    assert "compared with policy container 0" in out
    assert '- OCI.Process.Args: policy expects ["/pause"], request has ["sh"]' in out
    code, out, _ = _run(
        capsys,
        "explain",
        "--policy",
        str(policy_file),
        "--request",
        str(requests),
        "--output",
        "json",
    )
    explanation = json.loads(out)["results"][1]["explanation"]
    assert explanation["differences"][0]["field"] == "OCI.Process.Args"


def test_policy_from_initdata_toml_and_stdin_requests(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "initdata.toml"
    toml.write_bytes(Initdata({"policy.rego": POLICY}).to_toml())
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps(CREATE).encode())))
    code, out, _ = _run(
        capsys,
        "evaluate",
        "--policy",
        str(toml),
        "--request",
        "-",
        "--name",
        "CreateContainer",
    )
    assert code == 0
    assert out.splitlines()[0] == "1: CreateContainerRequest: allowed"


def _annotated(kind: str, name: str, policy: str) -> dict[str, object]:
    value = encode_annotation(Initdata({"policy.rego": policy}).to_toml())
    metadata = {"name": name, "annotations": {ANNOTATION: value}}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {}}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"template": {"metadata": metadata, "spec": {}}},
    }


def test_policy_from_annotated_yaml_needs_pod_when_several(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    denying = "package agent_policy\n\ndefault CreateContainerRequest := false\n"
    documents = [_annotated("Pod", "web", POLICY), _annotated("Deployment", "db", denying)]
    yaml_file = _write(tmp_path, "app.yml", "\n---\n".join(json.dumps(d) for d in documents))
    request = _write(tmp_path, "request.json", CREATE)
    common = ["--policy", str(yaml_file), "--request", str(request), "--name"]
    code, _, err = _run(capsys, "evaluate", *common, "CreateContainerRequest")
    assert code == 1
    line = _one_line_error(err)
    assert "Pod/web" in line
    assert "Deployment/db" in line
    assert _run(capsys, "evaluate", *common, "CreateContainerRequest", "--pod", "web")[0] == 0
    assert _run(capsys, "evaluate", *common, "CreateContainerRequest", "--pod", "db")[0] == 3


@pytest.mark.parametrize(
    ("policy", "request_text", "extra", "message"),
    [
        (None, json.dumps(CREATE), ["--name", "CreateContainerRequest"], "cannot read the policy"),
        (POLICY, "{not json", [], "not JSON"),
        (POLICY, json.dumps(CREATE), ["--name", "CreateBox"], "unknown request name 'CreateBox'"),
        (POLICY, json.dumps(CREATE), [], "needs --name"),
        ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n", "[]", [], ANNOTATION),
        ("package other\n\ndefault x := 1\n", "[]", [], "package other"),
        (POLICY, json.dumps([{"kind": "Nope", "request": {}}]), [], "request 1: unknown"),
        (POLICY, json.dumps({"kind": "RemoveContainerRequest"}), [], "needs --name"),
        (alias_bomb(9), "[]", [], "aliases expand"),
        (SELF_REFERENCE, "[]", [], "refers to itself"),
        (DEEP, "[]", [], "nested more deeply"),
        # Deep TOML is no initdata (tomllib recursed), and as YAML it is one string.
        ("a = " + "[" * 5000 + "]" * 5000, "[]", [], "carries the annotation"),
    ],
)
def test_bad_input_is_one_readable_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    policy: str | None,
    request_text: str,
    *,
    extra: list[str],
    message: str,
) -> None:
    policy_path = tmp_path / "missing.rego"
    if policy is not None:
        policy_path = _write(tmp_path, "policy.rego", policy)
    request = _write(tmp_path, "request.json", request_text)
    code, out, err = _run(
        capsys, "evaluate", "--policy", str(policy_path), "--request", str(request), *extra
    )
    assert code == 1
    assert out == ""
    assert message in _one_line_error(err)


def test_unknown_request_name_lists_known_ones(
    capsys: pytest.CaptureFixture[str], policy_file: Path, tmp_path: Path
) -> None:
    request = _write(tmp_path, "request.json", CREATE)
    argv = ["--policy", str(policy_file), "--request", str(request), "--name", "Bogus"]
    _, _, err = _run(capsys, "evaluate", *argv)
    assert "CreateContainerRequest, CreateSandboxRequest" in _one_line_error(err)


def test_help_documents_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["policy", "evaluate", "--help"])
    out = capsys.readouterr().out
    assert "exit codes:" in out
    assert "3  some request denied" in out


@pytest.mark.parametrize(
    "requests",
    [
        "[" * 100_000 + "]" * 100_000,  # a JSON list
        '{"kind": "CreateContainerRequest", "request": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "[" * 100_000 + "\n{}",  # JSON lines
    ],
    ids=["list", "object", "lines"],
)
def test_deeply_nested_requests_are_one_line(
    capsys: pytest.CaptureFixture[str], policy_file: Path, tmp_path: Path, requests: str
) -> None:
    path = _write(tmp_path, "deep.json", requests)
    code, _, err = _run(capsys, "evaluate", "--policy", str(policy_file), "--request", str(path))
    assert code == 1
    assert "nests deeper than 64 levels" in _one_line_error(err)
