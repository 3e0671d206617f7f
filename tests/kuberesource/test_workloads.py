"""Every workload kind exposes its pod; reading never changes a document."""

from __future__ import annotations

import copy

import pytest

from contrast.kuberesource.workloads import ResourceError, Workload, is_workload, workloads

from .builders import KINDS, pod_spec, resource, validate


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_exposes_its_pod(kind: str) -> None:
    document = resource(kind, pod_spec(runtimeClassName="contrast-cc"), annotations={"a": "b"})
    validate(document)
    workload = Workload(document, "f.yml")
    assert workload.kind == kind
    assert workload.runtime_class_name == "contrast-cc"
    assert workload.pod_annotation("a") == "b"
    assert [c["name"] for c in workload.containers()] == ["app"]
    workload.pod_spec["runtimeClassName"] = "changed"
    assert "changed" in repr(document)  # the edit landed in the document itself
    assert workload.describe() == f"f.yml: {kind}/app"


@pytest.mark.parametrize("kind", KINDS)
def test_reading_adds_nothing(kind: str) -> None:
    document = resource(kind)
    before = copy.deepcopy(document)
    workload = Workload(document)
    assert workload.pod_annotation("missing") is None
    assert workload.role == ""
    assert not workload.is_coordinator
    assert workload.init_containers() == []
    assert len(workload.all_containers()) == 1
    assert document == before


def test_lists_and_other_kinds() -> None:
    documents = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
        {"apiVersion": "v1", "kind": "List", "items": [resource("Pod"), resource("Job")]},
        None,
        "a scalar document",
        resource("CronJob"),
    ]
    assert [w.kind for w in workloads(documents)] == ["Pod", "Job", "CronJob"]
    assert not is_workload(documents[0])


def test_coordinator_role_and_secret_id() -> None:
    document = resource(
        "StatefulSet",
        annotations={"contrast.edgeless.systems/pod-role": "coordinator"},
        name="coordinator",
    )
    workload = Workload(document)
    assert workload.is_coordinator
    assert workload.workload_secret_id == "apps/v1/StatefulSet/default/coordinator"


def test_containers_that_are_not_a_list_are_an_error() -> None:
    workload = Workload(resource("Pod", {"containers": {"name": "app"}}))
    with pytest.raises(ResourceError, match="not a list of containers"):
        workload.containers()
