"""What `secure-pv: DEVICE:MOUNT` injects, checked against the original's shape and refusals."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contrast.kuberesource import inject, securepv
from contrast.kuberesource.securepv import SecurePvError
from contrast.kuberesource.workloads import Workload
from tests.kuberesource.builders import pod_spec, resource, validate

SECURE_PV = "contrast.edgeless.systems/secure-pv"
CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "device-name"},
    "spec": {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "volumeMode": "Block",
    },
}


def how_to(*, on_template: bool = True) -> dict[str, Any]:
    """The original's encrypted-storage how-to: a StatefulSet, its app mounting `mount-name`."""
    spec = pod_spec(
        runtimeClassName="contrast-cc",
        volumes=[{"name": "mount-name", "emptyDir": {"medium": "Memory"}}],
    )
    spec["containers"][0]["volumeMounts"] = [
        {"mountPath": "/mount/path", "mountPropagation": "HostToContainer", "name": "mount-name"}
    ]
    annotation = {SECURE_PV: "device-name:mount-name"}
    statefulset = resource("StatefulSet", spec, annotations=annotation if on_template else None)
    if not on_template:
        statefulset["metadata"]["annotations"] = annotation
    statefulset["spec"]["volumeClaimTemplates"] = [copy.deepcopy(CLAIM)]
    return statefulset


def injected(document: dict[str, Any]) -> Workload:
    workload = Workload(document, "app.yml")
    inject.inject(workload, coordinator_namespace="default")
    return workload


def initializer(workload: Workload) -> dict[str, Any]:
    containers = workload.init_containers()
    assert containers[0]["name"] == inject.INITIALIZER_NAME
    return dict(containers[0])


@pytest.mark.parametrize("on_template", [True, False], ids=["pod template", "workload metadata"])
def test_the_initializer_gets_what_the_original_gives_it(on_template: bool) -> None:
    workload = injected(how_to(on_template=on_template))
    container = initializer(workload)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CRYPTSETUP_DEVICE"] == "/dev/csi0"
    assert container["volumeDevices"] == [{"name": "device-name", "devicePath": "/dev/csi0"}]
    assert {"name": "mount-name", "mountPath": "/state", "mountPropagation": "Bidirectional"} in (
        container["volumeMounts"]
    )
    assert {"name": "contrast-secrets", "mountPath": "/contrast"} in container["volumeMounts"]
    assert container["securityContext"]["privileged"] is True
    memory = {"memory": "100Mi"}
    assert container["resources"] == {"limits": memory, "requests": memory}
    # A native sidecar that holds the mount; the app starts once the probe sees /done.
    assert container["restartPolicy"] == "Always"
    assert container["startupProbe"]["exec"]["command"][-1].endswith("os.path.exists('/done'))")
    # The user's emptyDir is kept as written; the pod stays valid for the API server.
    assert {"name": "mount-name", "emptyDir": {"medium": "Memory"}} in workload.pod_spec["volumes"]
    validate(workload.resource)


def test_injection_is_idempotent_and_follows_the_annotation() -> None:
    document = how_to()
    injected(document)
    once = copy.deepcopy(document)
    assert not inject.inject(Workload(document), coordinator_namespace="default")
    assert document == once
    # Another device: brought up to date. Annotation removed: the plain Initializer again.
    document["spec"]["volumeClaimTemplates"].append({**CLAIM, "metadata": {"name": "other"}})
    document["spec"]["template"]["metadata"]["annotations"][SECURE_PV] = "other:mount-name"
    assert inject.inject(Workload(document), coordinator_namespace="default")
    assert initializer(Workload(document))["volumeDevices"][0]["name"] == "other"
    del document["spec"]["template"]["metadata"]["annotations"][SECURE_PV]
    assert inject.inject(Workload(document), coordinator_namespace="default")
    plain = inject.initializer_container("default", service_mesh=False)
    assert initializer(Workload(document)) == plain


def test_a_missing_mount_volume_is_added_in_memory() -> None:
    document = how_to()
    document["spec"]["template"]["spec"]["volumes"] = []
    workload = injected(document)
    assert {"name": "mount-name", "emptyDir": {"medium": "Memory"}} in workload.pod_spec["volumes"]


def test_a_pvc_or_iscsi_volume_is_a_device() -> None:
    iscsi = {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.x", "lun": 0}
    for source in ({"persistentVolumeClaim": {"claimName": "data"}}, {"iscsi": iscsi}):
        spec = pod_spec(volumes=[{"name": "device-name", **source}])
        deployment = resource("Deployment", spec, annotations={SECURE_PV: "device-name:m"})
        container = initializer(injected(deployment))
        assert container["volumeDevices"][0]["name"] == "device-name"


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            lambda d: d["spec"].pop("volumeClaimTemplates"),
            "secure-pv device 'device-name' not found",
        ),
        (
            lambda d: d["spec"]["volumeClaimTemplates"][0]["spec"].pop("volumeMode"),
            "volume claim template with volumeMode Filesystem",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["volumes"].append(
                {"name": "device-name", "emptyDir": {}}
            ),
            "must reference a PVC or iSCSI device",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["volumes"].__setitem__(
                0, {"name": "mount-name", "configMap": {"name": "x"}}
            ),
            "secure-pv mount volume 'mount-name' is not an emptyDir",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0].pop(
                "mountPropagation"
            ),
            "mounts the secure-pv volume 'mount-name' without mountPropagation: HostToContainer",
        ),
        (
            lambda d: d["spec"]["template"]["metadata"]["annotations"].__setitem__(
                "contrast.edgeless.systems/skip-initializer", "true"
            ),
            "needs the Initializer",
        ),
    ],
    ids=[
        "no device",
        "filesystem claim",
        "emptyDir device",
        "mount not emptyDir",
        "no propagation",
        "skip-initializer",
    ],
)
def test_a_pod_that_cannot_hold_the_volume_is_refused(edit: Any, said: str) -> None:
    document = how_to()
    edit(document)
    before = copy.deepcopy(document)
    with pytest.raises((SecurePvError, inject.InjectionError)) as raised:
        injected(document)
    assert said in raised.value.explain()
    assert raised.value.explain().startswith("app.yml: StatefulSet/app: ")
    assert document == before  # refused before anything was added


def test_the_constants_are_the_initializers() -> None:
    from contrast.initializer import cryptsetup

    assert securepv.CRYPTSETUP_DEVICE_ENV == cryptsetup.DEVICE_ENV == "CRYPTSETUP_DEVICE"
    assert securepv.STATE_PATH == str(cryptsetup.STATE_PATH) == "/state"
