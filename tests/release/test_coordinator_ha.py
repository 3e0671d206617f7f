"""The Coordinator's resources for several replicas on the ConfigMap history.

Their shape is checked here; the Role is checked against what the Coordinator does on the real
API server, with its ServiceAccount's token, in `test_coordinator_rbac.py` (it works with the
Role, and fails without any one of its verbs).
"""

from __future__ import annotations

import io
from typing import Any

import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from contrast.cli.main import build_parser, main
from contrast.history.backends import HistoryBackend
from contrast.kuberesource import release
from contrast.platforms import by_name

KUBERNETES = "1.33"
PLATFORM = by_name("metal-qemu-snp")


def by_kind(resources: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for resource in resources:
        kinds.setdefault(resource["kind"], []).append(resource)
    return kinds


def coordinator_args(resources: list[dict[str, Any]]) -> list[str]:
    statefulset = by_kind(resources)["StatefulSet"][0]
    args: list[str] = statefulset["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


@pytest.mark.parametrize("history", list(HistoryBackend))
def test_resources_validate_against_the_kubernetes_schema(history: HistoryBackend) -> None:
    for resource in release.coordinator_resources(PLATFORM, history=history, namespace="ns"):
        kubernetes_validate.validate(resource, KUBERNETES, strict=True)


def test_configmaps_give_three_replicas_a_service_account_role_and_peer_service() -> None:
    kinds = by_kind(release.coordinator_resources(PLATFORM))
    statefulset = kinds["StatefulSet"][0]
    pod = statefulset["spec"]["template"]["spec"]
    assert statefulset["spec"]["replicas"] == 3
    assert pod["serviceAccountName"] == kinds["ServiceAccount"][0]["metadata"]["name"]
    assert "volumeClaimTemplates" not in statefulset["spec"]
    (role,) = kinds["Role"]
    verbs = ["create", "get", "update"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]
    (binding,) = kinds["RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "coordinator"}]
    peers = next(s for s in kinds["Service"] if s["metadata"]["name"] == release.PEER_SERVICE)
    assert peers["spec"]["clusterIP"] == "None"  # headless: DNS lists each ready pod
    assert "publishNotReadyAddresses" not in peers["spec"]  # only ready replicas hand the seed
    assert statefulset["spec"]["serviceName"] == release.PEER_SERVICE
    args = coordinator_args(list(release.coordinator_resources(PLATFORM)))
    assert args[:3] == ["coordinator", "--history", "configmaps"]
    assert args[args.index("--peer-service") + 1] == f"{release.PEER_SERVICE}:7777"


def test_files_give_one_replica_on_a_volume_and_no_api_access() -> None:
    resources = release.coordinator_resources(PLATFORM, history=HistoryBackend.FILES)
    kinds = by_kind(resources)
    assert sorted(kinds) == ["Service", "StatefulSet"]
    statefulset = kinds["StatefulSet"][0]
    assert statefulset["spec"]["replicas"] == 1
    assert statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "state"
    assert coordinator_args(resources) == [
        "coordinator", "--history", "files", "--state-dir", release.STATE_DIR
    ]  # fmt: skip


def test_the_namespace_goes_on_every_resource_and_the_binding_subject() -> None:
    resources = release.coordinator_resources(PLATFORM, namespace="team-a", replicas=5)
    assert {resource["metadata"]["namespace"] for resource in resources} == {"team-a"}
    assert by_kind(resources)["RoleBinding"][0]["subjects"][0]["namespace"] == "team-a"
    assert by_kind(resources)["StatefulSet"][0]["spec"]["replicas"] == 5


def test_the_coordinator_parses_the_args_the_statefulset_gives_it() -> None:
    for history in HistoryBackend:
        args = coordinator_args(release.coordinator_resources(PLATFORM, history=history))
        parsed = build_parser().parse_args(args)
        assert parsed.history is history


def test_replicas_on_files_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["coordinator-resources", "--platform", "metal-qemu-snp", "--history", "files"]
    assert main([*argv, "--replicas", "2"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "--replicas 2 needs --history configmaps" in error
    assert main([*argv, "--replicas", "1"]) == 0
    assert main(["coordinator-resources", "--platform", "metal-qemu-snp", "--replicas", "0"]) == 1
    assert "at least one replica" in capsys.readouterr().err


def test_cli_prints_the_resources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["coordinator-resources", "--platform", "metal-qemu-tdx", "--replicas", "2"]) == 0
    documents = list(YAML(typ="safe").load_all(io.StringIO(capsys.readouterr().out)))
    assert [document["kind"] for document in documents] == [
        "ServiceAccount", "Role", "RoleBinding", "StatefulSet", "Service", "Service", "Service"
    ]  # fmt: skip
    assert documents[3]["spec"]["replicas"] == 2
