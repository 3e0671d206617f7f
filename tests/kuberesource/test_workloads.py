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
    assert not is_workload({"kind": {"Deployment": 1}})  # a kind that cannot even be hashed


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


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"kind": "Deployment", "spec": []}, "Deployment.spec is not a mapping"),
        (
            {"kind": "CronJob", "spec": {"jobTemplate": {"spec": "x"}}},
            "CronJob.spec.jobTemplate.spec is not a mapping",
        ),
        (
            {"kind": "Job", "spec": {"template": 3}},
            "Job.spec.template is not a mapping",
        ),
    ],
)
def test_a_pod_template_path_through_a_non_mapping_is_named(
    document: dict[str, object], message: str
) -> None:
    with pytest.raises(ResourceError, match=f"^{message}$"):
        _ = Workload(document).pod_template


def test_a_missing_pod_template_is_added_empty() -> None:
    document: dict[str, object] = {"kind": "CronJob"}
    assert Workload(document).pod_template == {}
    assert document == {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {}}}}}


ROLE = "contrast.edgeless.systems/pod-role"
SECRET_ID = "contrast.edgeless.systems/workload-secret-id"
TEMPLATE_ANNOTATIONS = {
    "Deployment": "spec.template.metadata.annotations",
    "CronJob": "spec.jobTemplate.spec.template.metadata.annotations",
}


def _on_the_workload(document: dict[str, object], annotations: dict[str, str]) -> None:
    metadata = document["metadata"]
    assert isinstance(metadata, dict)
    metadata.setdefault("annotations", {}).update(annotations)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("place", ["workload metadata", "pod template metadata"])
def test_contrast_annotations_count_in_either_place(kind: str, place: str) -> None:
    # The original reads them from the workload's own metadata, its guide shows the pod
    # template's: a seed written either way must work.
    annotations = {ROLE: "coordinator", SECRET_ID: "shop/ledger"}
    if place == "workload metadata":
        document = resource(kind)
        _on_the_workload(document, annotations)
    else:
        document = resource(kind, annotations=annotations)
    validate(document)
    before = copy.deepcopy(document)
    workload = Workload(document, "f.yml")
    assert workload.is_coordinator
    assert workload.workload_secret_id == "shop/ledger"
    assert workload.annotation(SECRET_ID) == "shop/ledger"
    assert workload.annotation("contrast.edgeless.systems/skip-initializer") is None
    assert document == before


@pytest.mark.parametrize("kind", sorted(TEMPLATE_ANNOTATIONS))
def test_one_annotation_with_two_values_is_refused_naming_both_places(kind: str) -> None:
    document = resource(kind, annotations={SECRET_ID: "from-template"})
    _on_the_workload(document, {SECRET_ID: "from-workload"})
    workload = Workload(document, "f.yml")
    with pytest.raises(ResourceError) as raised:
        _ = workload.workload_secret_id
    message = raised.value.explain()
    assert "\n" not in message
    assert message.startswith(f"f.yml: {kind}/app: ")
    assert SECRET_ID in message
    assert "'from-workload' in metadata.annotations" in message
    assert f"'from-template' in {TEMPLATE_ANNOTATIONS[kind]}" in message

    # The same value in both places is no conflict.
    _on_the_workload(document, {SECRET_ID: "from-template"})
    assert workload.workload_secret_id == "from-template"


def test_default_secret_id_without_the_annotation() -> None:
    workload = Workload(resource("Deployment", namespace="shop", name="web"))
    assert workload.workload_secret_id == "apps/v1/Deployment/shop/web"
