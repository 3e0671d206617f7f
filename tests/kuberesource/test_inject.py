"""Injection: Initializer first, sidecar after it, one memory volume everywhere, idempotent."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.cli import components
from contrast.cli import servicemesh as servicemesh_cli
from contrast.cli.main import build_parser
from contrast.kuberesource import inject, yamlio
from contrast.kuberesource.inject import (
    INITIALIZER_NAME,
    SERVICE_MESH_NAME,
    InjectionError,
    ServiceMeshConfig,
    coordinator_namespace,
)
from contrast.kuberesource.release import INITIALIZER_IMAGE, SERVICE_MESH_IMAGE
from contrast.kuberesource.workloads import ResourceError, Workload
from contrast.servicemesh.sidecar import SidecarConfig

from .builders import KINDS, pod_spec, resource, validate

TESTDATA = Path(__file__).parent / "testdata"
INGRESS = "main#8001#false##metrics#8080#true"
EGRESS = "backend#127.0.0.2:4001#backend.default:4001"
MESH = {
    "contrast.edgeless.systems/servicemesh-ingress": INGRESS,
    "contrast.edgeless.systems/servicemesh-egress": EGRESS,
}


def env(container: dict[str, Any]) -> dict[str, str]:
    return {entry["name"]: entry["value"] for entry in container.get("env", [])}


def names(containers: list[Any]) -> list[str]:
    return [container["name"] for container in containers]


@pytest.mark.parametrize("kind", KINDS)
def test_initializer_in_every_kind(kind: str) -> None:
    spec = pod_spec(
        runtimeClassName="contrast-cc",
        initContainers=[{"name": "migrate", "image": "ghcr.io/example/migrate:v1"}],
    )
    document = resource(kind, spec)
    workload = Workload(document, "app.yml")
    assert inject.inject(workload, coordinator_namespace="contrast") is True
    validate(document)
    init = workload.init_containers()
    assert names(init) == [INITIALIZER_NAME, "migrate"]
    initializer = init[0]
    assert initializer["image"] == INITIALIZER_IMAGE
    assert env(initializer) == {
        "COORDINATOR_HOST": "coordinator-ready.contrast",
        "CONTRAST_SERVICE_MESH_DISABLED": "true",
    }
    assert initializer["securityContext"]["capabilities"]["add"] == ["NET_ADMIN"]
    assert initializer["resources"] == {
        "limits": {"memory": "50Mi"}, "requests": {"memory": "50Mi"},
    }  # fmt: skip
    assert workload.pod_spec["volumes"] == [
        {"name": "contrast-secrets", "emptyDir": {"medium": "Memory"}}
    ]
    for container in workload.all_containers():
        assert {"name": "contrast-secrets", "mountPath": "/contrast"} in container["volumeMounts"]
    before = copy.deepcopy(document)
    assert inject.inject(workload, coordinator_namespace="contrast") is False
    assert document == before


def test_the_injected_commands_are_what_the_programs_expect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workload = Workload(resource("Pod", pod_spec(), annotations=MESH))
    inject.inject(workload, coordinator_namespace="ns")
    initializer, sidecar = workload.init_containers()
    for name, value in {**env(initializer), **env(sidecar)}.items():
        monkeypatch.setenv(name, value)
    arguments = build_parser().parse_args(initializer["command"][1:])
    assert arguments.run is components.run_initializer
    assert arguments.coordinator == "coordinator-ready.ns"
    assert arguments.output == Path("/contrast")
    arguments = build_parser().parse_args(sidecar["command"][1:])
    assert arguments.run is servicemesh_cli.run_sidecar
    assert arguments.tls_dir == Path("/contrast/tls-config")
    config = SidecarConfig.from_environment(env(sidecar))
    assert (config.ingress, config.egress, config.admin_port) == (INGRESS, EGRESS, None)


def test_sidecar_tls_example_round_trips_through_yaml() -> None:
    path = TESTDATA / "helm-template.yaml"
    resources = yamlio.load(path)
    (statefulset,) = resources.workloads()
    assert inject.inject(statefulset, coordinator_namespace="default")
    initializer, sidecar = statefulset.init_containers()
    assert (initializer["name"], sidecar["name"]) == (INITIALIZER_NAME, SERVICE_MESH_NAME)
    assert env(initializer) == {"COORDINATOR_HOST": "coordinator-ready.default"}
    assert sidecar["image"] == SERVICE_MESH_IMAGE
    assert sidecar["restartPolicy"] == "Always"
    assert env(sidecar) == {
        "CONTRAST_INGRESS_PROXY_CONFIG": INGRESS,
        "CONTRAST_EGRESS_PROXY_CONFIG": EGRESS,
    }
    assert sidecar["startupProbe"]["tcpSocket"] == {"port": 15006}
    assert sidecar["securityContext"]["capabilities"]["add"] == ["NET_ADMIN"]
    assert sidecar["resources"]["limits"] == sidecar["resources"]["requests"]
    assert "ports" not in sidecar
    for document in resources.documents:
        if document is not None:
            validate(document)
    text = resources.dump()
    assert "# The sidecar terminates TLS for the API" in text
    again = yamlio.load_text(text, path)
    (statefulset,) = again.workloads()
    assert inject.inject(statefulset, coordinator_namespace="default") is False
    assert again.dump() == text


def test_admin_port_becomes_env_and_container_port() -> None:
    annotations = {"contrast.edgeless.systems/servicemesh-admin-interface-port": "9901"}
    workload = Workload(resource("Deployment", annotations=annotations))
    inject.inject(workload, coordinator_namespace="default")
    initializer, sidecar = workload.init_containers()
    assert "CONTRAST_SERVICE_MESH_DISABLED" not in env(initializer)
    assert env(sidecar) == {"CONTRAST_ADMIN_PORT": "9901"}
    assert sidecar["ports"] == [{"name": "contrast-admin", "containerPort": 9901}]
    validate(workload.resource)


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"contrast.edgeless.systems/servicemesh-egress": ""}, "is empty"),
        ({"contrast.edgeless.systems/servicemesh-egress": "backend#10.0.0.1:4001#b:1"}, "127"),
        ({"contrast.edgeless.systems/servicemesh-egress": "backend#127.0.0.2:4001"}, "fields"),
        ({"contrast.edgeless.systems/servicemesh-ingress": "main#8001#maybe"}, "true or false"),
        ({"contrast.edgeless.systems/servicemesh-admin-interface-port": "admin"}, "not a port"),
        ({"contrast.edgeless.systems/servicemesh-admin-interface-port": "70000"}, "not a port"),
    ],
)
def test_bad_service_mesh_annotations(annotations: dict[str, str], message: str) -> None:
    document = resource("Deployment", annotations=annotations)
    before = copy.deepcopy(document)
    with pytest.raises(InjectionError, match=message) as error:
        inject.inject(Workload(document, "app.yml"), coordinator_namespace="default")
    assert "app.yml: Deployment/app" in str(error.value)
    assert error.value.hint
    assert document == before


def test_empty_ingress_means_every_port_needs_mtls() -> None:
    annotations = {"contrast.edgeless.systems/servicemesh-ingress": ""}
    config = ServiceMeshConfig.from_workload(Workload(resource("Pod", annotations=annotations)))
    assert config == ServiceMeshConfig(ingress="", egress=None, admin_port=None)


def test_coordinator_gets_nothing() -> None:
    path = TESTDATA / "multi-runtime.yml"
    resources = yamlio.load(path)
    workloads = resources.workloads()
    assert coordinator_namespace(workloads) == "contrast"
    coordinator = workloads[0]
    assert coordinator.is_coordinator
    assert inject.inject(coordinator, coordinator_namespace="contrast") is False
    assert not resources.changed
    snp_app = workloads[1]
    assert inject.inject(snp_app, coordinator_namespace="contrast")
    assert env(snp_app.init_containers()[0])["COORDINATOR_HOST"] == "coordinator-ready.contrast"


def test_coordinator_namespace_default_and_conflict() -> None:
    plain = [Workload(resource("Pod"))]
    assert coordinator_namespace(plain) == "default"
    role = {"contrast.edgeless.systems/pod-role": "coordinator"}
    two = [
        Workload(resource("StatefulSet", annotations=role, namespace="a")),
        Workload(resource("StatefulSet", annotations=role, namespace="b")),
    ]
    with pytest.raises(InjectionError, match="several namespaces"):
        coordinator_namespace(two)


def test_skip_annotation_and_flags() -> None:
    skip = {"contrast.edgeless.systems/skip-initializer": "true", **MESH}
    workload = Workload(resource("Pod", annotations=skip))
    assert inject.inject(workload, coordinator_namespace="default")
    assert names(workload.init_containers()) == [SERVICE_MESH_NAME]
    assert "volumes" not in workload.pod_spec
    assert "volumeMounts" not in workload.init_containers()[0]
    validate(workload.resource)

    workload = Workload(resource("Pod", annotations=MESH))
    assert inject.inject(workload, coordinator_namespace="default", skip_initializer=True)
    assert names(workload.init_containers()) == [SERVICE_MESH_NAME]

    workload = Workload(resource("Pod", annotations=MESH))
    assert inject.inject(workload, coordinator_namespace="default", skip_service_mesh=True)
    (initializer,) = workload.init_containers()
    # Without a sidecar, the Initializer lifts the default-deny rule itself.
    assert env(initializer)["CONTRAST_SERVICE_MESH_DISABLED"] == "true"

    document = resource("Pod", annotations=MESH)
    before = copy.deepcopy(document)
    assert not inject.inject(
        Workload(document),
        coordinator_namespace="default",
        skip_initializer=True,
        skip_service_mesh=True,
    )
    assert document == before


def test_existing_initializer_is_kept_but_follows_the_pod() -> None:
    own = {
        "name": INITIALIZER_NAME,
        "image": "registry.example/my-initializer:v1",
        "env": [{"name": "CONTRAST_SERVICE_MESH_DISABLED", "value": "true"}],
    }
    workload = Workload(
        resource("Pod", pod_spec(initContainers=[own]), annotations=MESH), "app.yml"
    )
    assert inject.inject(workload, coordinator_namespace="default")
    initializer, sidecar = workload.init_containers()
    assert initializer["image"] == "registry.example/my-initializer:v1"
    assert env(initializer) == {"COORDINATOR_HOST": "coordinator-ready.default"}
    assert sidecar["name"] == SERVICE_MESH_NAME
    assert not inject.inject(workload, coordinator_namespace="default")


def test_sidecar_follows_changed_annotations() -> None:
    workload = Workload(resource("Pod", annotations=MESH))
    inject.inject(workload, coordinator_namespace="default")
    workload.pod_annotations["contrast.edgeless.systems/servicemesh-ingress"] = "web#443#false"
    assert inject.inject(workload, coordinator_namespace="default")
    assert env(workload.init_containers()[1])["CONTRAST_INGRESS_PROXY_CONFIG"] == "web#443#false"
    for annotation in list(MESH):
        del workload.pod_annotations[annotation]
    assert inject.inject(workload, coordinator_namespace="default")
    (initializer,) = workload.init_containers()
    assert env(initializer)["CONTRAST_SERVICE_MESH_DISABLED"] == "true"
    assert not inject.inject(workload, coordinator_namespace="default")


@pytest.mark.parametrize(
    "volume",
    [
        {"name": "contrast-secrets", "configMap": {"name": "x"}},
        {"name": "contrast-secrets", "hostPath": {"path": "/tmp"}},
    ],
)
def test_existing_secrets_volume_must_be_an_empty_dir(volume: dict[str, Any]) -> None:
    workload = Workload(resource("Pod", pod_spec(volumes=[volume])), "app.yml")
    with pytest.raises(InjectionError, match="not an emptyDir") as error:
        inject.inject(workload, coordinator_namespace="default")
    assert "app.yml: Pod/app" in str(error.value)


def test_existing_empty_dir_volume_is_used() -> None:
    volume = {"name": "contrast-secrets", "emptyDir": {}}
    workload = Workload(resource("Pod", pod_spec(volumes=[volume])))
    inject.inject(workload, coordinator_namespace="default")
    assert workload.pod_spec["volumes"] == [{"name": "contrast-secrets", "emptyDir": {}}]


def test_another_volume_at_contrast_is_an_error() -> None:
    spec = pod_spec(volumes=[{"name": "data", "emptyDir": {}}])
    spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/contrast"}]
    with pytest.raises(InjectionError, match="mounts 'data' at /contrast"):
        inject.inject(Workload(resource("Pod", spec)), coordinator_namespace="default")


_annotation_sets = st.fixed_dictionaries(
    {},
    optional={
        "contrast.edgeless.systems/servicemesh-ingress": st.sampled_from(
            ["", INGRESS, "web#443#false"]
        ),
        "contrast.edgeless.systems/servicemesh-egress": st.just(EGRESS),
        "contrast.edgeless.systems/servicemesh-admin-interface-port": st.sampled_from(
            ["9901", "15000"]
        ),
        "contrast.edgeless.systems/skip-initializer": st.sampled_from(["true", "false"]),
        "contrast.edgeless.systems/pod-role": st.sampled_from(["coordinator", "worker"]),
    },
)


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    annotations=_annotation_sets,
    containers=st.integers(1, 3),
    init_containers=st.integers(0, 2),
    skip_initializer=st.booleans(),
    skip_service_mesh=st.booleans(),
)
def test_injection_is_idempotent_and_valid(
    *,
    kind: str,
    annotations: dict[str, str],
    containers: int,
    init_containers: int,
    skip_initializer: bool,
    skip_service_mesh: bool,
) -> None:
    spec = pod_spec(
        initContainers=[
            {"name": f"init-{i}", "image": "busybox:1.36"} for i in range(init_containers)
        ]
    )
    spec["containers"] = [dict(spec["containers"][0], name=f"c-{i}") for i in range(containers)]
    workload = Workload(resource(kind, spec, annotations=annotations))
    flags = {"skip_initializer": skip_initializer, "skip_service_mesh": skip_service_mesh}
    inject.inject(workload, coordinator_namespace="ns", **flags)
    validate(workload.resource)
    snapshot = copy.deepcopy(workload.resource)
    assert inject.inject(workload, coordinator_namespace="ns", **flags) is False
    assert workload.resource == snapshot
    injected = [c["name"] for c in workload.init_containers()]
    coordinator = annotations.get("contrast.edgeless.systems/pod-role") == "coordinator"
    wants_initializer = not (
        skip_initializer
        or coordinator
        or annotations.get("contrast.edgeless.systems/skip-initializer") == "true"
    )
    mesh = not (skip_service_mesh or coordinator) and any(
        "servicemesh" in key for key in annotations
    )
    expected = [INITIALIZER_NAME] * wants_initializer + [SERVICE_MESH_NAME] * mesh
    assert injected[: len(expected)] == expected
    assert injected[len(expected) :] == [f"init-{i}" for i in range(init_containers)]


WORKLOAD_KINDS = [kind for kind in KINDS if kind != "Pod"]


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_mesh_annotations_on_the_workload_metadata_give_the_sidecar(kind: str) -> None:
    # Where the workload deployment guide puts them: the Deployment's (…) own metadata.
    document = resource(kind, pod_spec(runtimeClassName="contrast-cc"))
    admin = {"contrast.edgeless.systems/servicemesh-admin-interface-port": "9901"}
    document["metadata"]["annotations"] = {**MESH, **admin}
    workload = Workload(document, "app.yml")
    assert inject.inject(workload, coordinator_namespace="default")
    validate(document)
    initializer, sidecar = workload.init_containers()
    assert sidecar["name"] == SERVICE_MESH_NAME
    assert env(sidecar) == {
        "CONTRAST_INGRESS_PROXY_CONFIG": INGRESS,
        "CONTRAST_EGRESS_PROXY_CONFIG": EGRESS,
        "CONTRAST_ADMIN_PORT": "9901",
    }
    assert "CONTRAST_SERVICE_MESH_DISABLED" not in env(initializer)
    assert not inject.inject(workload, coordinator_namespace="default")


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_skip_initializer_on_the_workload_metadata(kind: str) -> None:
    document = resource(kind, pod_spec(runtimeClassName="contrast-cc"))
    document["metadata"]["annotations"] = {"contrast.edgeless.systems/skip-initializer": "true"}
    workload = Workload(document, "app.yml")
    assert not inject.inject(workload, coordinator_namespace="default")
    assert workload.init_containers() == []


def test_mesh_annotation_in_both_places_with_different_values_is_refused() -> None:
    document = resource("Deployment", annotations=MESH)
    document["metadata"]["annotations"] = {
        "contrast.edgeless.systems/servicemesh-ingress": "web#443#false"
    }
    before = copy.deepcopy(document)
    with pytest.raises(ResourceError) as raised:
        inject.inject(Workload(document, "app.yml"), coordinator_namespace="default")
    message = raised.value.explain()
    assert "\n" not in message
    assert "metadata.annotations" in message
    assert "spec.template.metadata.annotations" in message
    assert document == before
