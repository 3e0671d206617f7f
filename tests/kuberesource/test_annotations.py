"""The table of Contrast annotations and the check that refuses every one it does not accept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contrast.kuberesource import knownannotations as annotations
from contrast.kuberesource.knownannotations import TABLE, AnnotationError, check_resource

README = Path(__file__).resolve().parents[2] / "README.md"
PREFIX = "contrast.edgeless.systems/"


def deployment(
    on_template: dict[str, Any] | None = None, on_resource: dict[str, Any] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "db", "namespace": "shop"}
    if on_resource is not None:
        metadata["annotations"] = on_resource
    template: dict[str, Any] = {"metadata": {}, "spec": {"containers": []}}
    if on_template is not None:
        template["metadata"]["annotations"] = on_template
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata,
            "spec": {"template": template}}  # fmt: skip


def refused(resource: Any) -> str:
    with pytest.raises(AnnotationError) as raised:
        check_resource(resource, "resources/db.yml")
    text = raised.value.explain()
    assert "\n" not in text
    return text


def test_readme_holds_the_table_of_every_annotation() -> None:
    text = README.read_text()
    assert "## Annotations" in text
    assert annotations.markdown_table() in text
    section = text.split("## Annotations", 1)[1].split("\n## ", 1)[0]
    for annotation in TABLE:
        assert f"`{annotation.key}`" in section


def test_every_annotation_the_code_reads_is_in_the_table() -> None:
    """The keys other modules read come from the table's names, not from a second list."""
    from contrast.kuberesource import inject, workloads

    read = {
        workloads.ROLE_ANNOTATION,
        workloads.WORKLOAD_SECRET_ID_ANNOTATION,
        inject.SKIP_INITIALIZER_ANNOTATION,
        *inject.SERVICE_MESH_ANNOTATIONS,
    }
    assert read <= set(annotations.BY_KEY)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("pod-role", "coordinator"),
        ("skip-initializer", "true"),
        ("skip-initializer", "False"),
        ("servicemesh-ingress", ""),
        ("servicemesh-ingress", "main#8001#false##metrics#8080#true"),
        ("servicemesh-egress", "backend#127.0.0.2:4001#backend.default:4001"),
        ("servicemesh-admin-interface-port", "9901"),
        ("workload-secret-id", "my-workload-secret"),
        ("image-store-size", "0"),
        ("image-store-size", "250Gi"),
        ("secure-pv", "device-name:mount-name"),
    ],
)
def test_accepted_values_pass_on_template_and_resource(key: str, value: str) -> None:
    check_resource(deployment(on_template={PREFIX + key: value}))
    check_resource(deployment(on_resource={PREFIX + key: value}))


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("pod-role", "coordinatr", "accepted: coordinator, contrast-node-installer"),
        ("skip-initializer", "yes", "accepted: true, false"),
        ("servicemesh-ingress", "main#80", "does not parse"),
        ("servicemesh-egress", " ", "is empty"),
        ("servicemesh-admin-interface-port", "99999", "is not a port"),
        ("workload-secret-id", "", "is empty"),
        ("secure-pv", "device-name", "is not DEVICE:MOUNT"),
        ("secure-pv", "dev:mount:extra", "is not DEVICE:MOUNT"),
        ("secure-pv", "Device:mount", "is not DEVICE:MOUNT"),
        ("image-store-size", "10GB", "is not a Kubernetes quantity"),
        ("image-store-size", "0Gi", "is not a positive size"),
        ("image-store-size", "-1Gi", "is not a positive size"),
        ("platform", "metal-qemu-snp", "accepted: "),
    ],
)
def test_values_outside_the_forms_are_refused(key: str, value: str, said: str) -> None:
    for resource in (
        deployment(on_template={PREFIX + key: value}),
        deployment(on_resource={PREFIX + key: value}),
    ):
        text = refused(resource)
        assert text.startswith(f"resources/db.yml: StatefulSet/shop/db: annotation {PREFIX}{key}=")
        assert said in text


def test_a_misspelt_annotation_is_refused_with_the_right_name() -> None:
    text = refused(deployment(on_template={PREFIX + "secure-pvs": "dev:mount"}))
    assert text == (
        f"resources/db.yml: StatefulSet/shop/db: unknown annotation {PREFIX}secure-pvs"
        f" (did you mean {PREFIX}secure-pv?)"
    )


def test_an_unknown_annotation_lists_the_known_ones() -> None:
    text = refused(deployment(on_resource={PREFIX + "gpu-count": "1"}))
    assert f"unknown annotation {PREFIX}gpu-count" in text
    assert all(annotation.name in text for annotation in TABLE)


def test_other_prefixes_and_labels_are_not_ours() -> None:
    resource = deployment(
        on_template={"example.com/secure-pv": "x", "contrast.edgeless.systems": "1"}
    )
    resource["metadata"]["labels"] = {PREFIX + "history": "manifests"}
    check_resource(resource)


def test_workload_annotations_do_nothing_on_a_service() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db",
               "annotations": {PREFIX + "secure-pv": "a:b"}}}  # fmt: skip
    text = refused(service)
    assert "Service/default/db: annotation" in text
    assert "does nothing on a Service" in text
    service["metadata"]["annotations"] = {PREFIX + "expose-service": "true"}
    check_resource(service)


def test_lists_pods_and_cronjobs_are_walked() -> None:
    bad = {PREFIX + "skip-initialiser": "true"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": bad}}
    template = {"metadata": {"annotations": bad}}
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"jobTemplate": {"spec": {"template": template}}}}  # fmt: skip
    for resource in (pod, cron, {"kind": "List", "items": [pod]}):
        assert "did you mean " + PREFIX + "skip-initializer?" in refused(resource)


def test_a_value_that_is_not_a_string_is_refused() -> None:
    text = refused(deployment(on_template={PREFIX + "servicemesh-admin-interface-port": 9901}))
    assert "is not a string" in text
