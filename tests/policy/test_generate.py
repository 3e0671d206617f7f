"""policy_data for representative pods: the fields genpolicy derives and the rules compare."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from contrast.images.model import ImageConfig, ImageFacts
from contrast.kuberesource.workloads import Workload
from contrast.policy.generate import PolicyGenerator, default_rules
from contrast.policy.generation_errors import PolicyGenerationError
from contrast.policy.initdata import Initdata, decode_annotation, policy_hash
from contrast.policy.settings import default_settings

APP = "registry.example/app@sha256:" + "ab" * 32
PASSWD = "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"
GROUP = "root:x:0:\napp:x:1000:app\nextra:x:2000:app\n"


def facts(reference: str, **config: Any) -> ImageFacts:
    return ImageFacts(
        reference, "sha256:" + "00" * 32, ImageConfig.from_json(config), PASSWD, GROUP
    )


def images(*references: str) -> dict[str, ImageFacts]:
    settings = default_settings()
    table = {
        settings.pause_image: facts(settings.pause_image, User="65535:65535", Entrypoint=["/pause"])
    }
    for reference in references:
        table[reference] = facts(
            reference,
            Entrypoint=["/bin/app"],
            Cmd=["--serve"],
            Env=["PATH=/bin"],
            WorkingDir="/srv",
        )
    return table


def container(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": APP,
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
        **fields,
    }


def pod(*containers: dict[str, Any], kind: str = "Pod", name: str = "web", **spec: Any) -> Workload:
    pod_spec = {"containers": list(containers), **spec}
    template = {"metadata": {"labels": {"app": name}}, "spec": pod_spec}
    if kind == "Pod":
        resource: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": pod_spec,
        }
    elif kind == "CronJob":
        resource = {
            "apiVersion": "batch/v1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": {"jobTemplate": {"spec": {"template": template}}},
        }
    else:
        resource = {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": {"template": template},
        }
    return Workload(resource)


def policy_data(workload: Workload, config: list[Any] | None = None) -> dict[str, Any]:
    generator = PolicyGenerator(default_rules(), default_settings())
    return generator.policy_data(workload, images(APP), config or [])


def names(data: dict[str, Any]) -> list[str | None]:
    return [
        c["OCI"]["Annotations"].get("io.kubernetes.cri.container-name") for c in data["containers"]
    ]


def test_container_order_is_pause_then_reversed_init_containers_then_containers() -> None:
    data = policy_data(
        pod(container("main"), initContainers=[container("first"), container("second")])
    )
    assert names(data) == [None, "second", "first", "main"]
    assert (
        data["containers"][0]["OCI"]["Annotations"]["io.kubernetes.cri.container-type"] == "sandbox"
    )


def test_top_level_and_container_keys_follow_genpolicy_order() -> None:
    data = policy_data(pod(container("main")))
    assert list(data) == [
        "containers",
        "common",
        "sandbox",
        "request_defaults",
        "devices",
        "cluster_config",
    ]
    assert list(data["containers"][1]) == [
        "OCI",
        "storages",
        "devices",
        "sandbox_pidns",
        "exec_commands",
        "runtime_anno_patterns",
    ]
    assert list(data["containers"][1]["OCI"]) == [
        "Version",
        "Process",
        "Root",
        "Mounts",
        "Annotations",
        "Linux",
    ]
    assert "image_layer_verification" not in data["common"]
    assert data["sandbox"]["storages"][0]["shared"] is False


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        ("Pod", "web", "web-1"),
        ("Deployment", "web-6674f9448-xjrzf", "web-6674f9448"),
        ("ReplicaSet", "web-xjrzf", "web"),
        ("StatefulSet", "web-12", "web-x"),
        ("Job", "web-2-xjrzf", "web-2-aaaaa"),
        ("CronJob", "web-28930140-xjrzf", "web-xjrzf"),
    ],
)
def test_sandbox_name_regex_per_kind(kind: str, good: str, bad: str) -> None:
    data = policy_data(pod(container("main"), kind=kind))
    pattern = data["containers"][1]["OCI"]["Annotations"]["io.kubernetes.cri.sandbox-name"]
    assert re.search(pattern, good)
    assert not re.search(pattern, bad)


def test_generate_name_pods_get_a_random_suffix() -> None:
    workload = Workload(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "job."},
            "spec": {"containers": [container("main")]},
        }
    )
    pattern = policy_data(workload)["containers"][1]["OCI"]["Annotations"][
        "io.kubernetes.cri.sandbox-name"
    ]
    assert re.search(pattern, "job.x7b2q")
    assert not re.search(pattern, "jobax7b2q")


def test_process_from_image_and_yaml_with_expansion() -> None:
    main = container(
        "main",
        args=["$(GREETING)", "$$(GREETING)", "$(UNDEFINED)"],
        env=[
            {"name": "NAME", "value": "world"},
            {"name": "GREETING", "value": "hello-$(NAME)"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "PATH", "value": "/usr/bin"},
        ],
    )
    process = policy_data(pod(main))["containers"][1]["OCI"]["Process"]
    assert process["Args"] == ["/bin/app", "hello-world", "$$(GREETING)", "$(UNDEFINED)"]
    assert process["Env"] == [
        "PATH=/usr/bin",
        "HOSTNAME=$(host-name)",
        "NAME=world",
        "GREETING=hello-world",
        "POD=$(sandbox-name)",
        "IP=$(pod-ip)",
    ]
    assert process["Cwd"] == "/srv"
    # The image runs as root; container-level runAs* keep root's gid 0 (genpolicy's quirk).
    assert process["User"] == {
        "UID": 1000,
        "GID": 1000,
        "AdditionalGids": [0, 1000],
        "Username": "",
    }
    assert process["Capabilities"]["Bounding"] == ["$(default_caps)"]


def test_pod_level_identity_rederives_the_groups() -> None:
    main = {"name": "main", "image": APP}
    context = {"runAsUser": 1000, "runAsGroup": 1000, "supplementalGroups": [2000]}
    data = policy_data(pod(main, securityContext=context))
    user = data["containers"][1]["OCI"]["Process"]["User"]
    assert user == {"UID": 1000, "GID": 1000, "AdditionalGids": [1000, 2000], "Username": ""}
    pause = data["containers"][0]["OCI"]["Process"]["User"]
    assert (pause["UID"], pause["GID"]) == (1000, 1000)


def test_command_replaces_entrypoint_and_cmd() -> None:
    process = policy_data(pod(container("main", command=["/bin/other"])))["containers"][1]["OCI"][
        "Process"
    ]
    assert process["Args"] == ["/bin/other"]


def test_env_from_config_maps_and_secrets() -> None:
    config = [
        {"kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"b": "2", "a": "1"}},
        {
            "kind": "Secret",
            "metadata": {"name": "token"},
            "data": {"value": base64.b64encode(b"s3cret").decode()},
        },
    ]
    main = container(
        "main",
        envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
        env=[
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "value"}}},
            {
                "name": "OPT",
                "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "x", "optional": True}},
            },
        ],
    )
    env = policy_data(pod(main), config)["containers"][1]["OCI"]["Process"]["Env"]
    assert env[-3:] == ["CFG_a=1", "CFG_b=2", "TOKEN=s3cret"]


def test_missing_config_map_is_named() -> None:
    main = container("main", envFrom=[{"configMapRef": {"name": "absent"}}])
    with pytest.raises(PolicyGenerationError, match="ConfigMap 'absent'") as caught:
        policy_data(pod(main))
    assert caught.value.hint


def test_probes_and_hooks_become_exec_commands_in_order() -> None:
    main = container(
        "main",
        readinessProbe={"exec": {"command": ["ready"]}},
        livenessProbe={"exec": {"command": ["alive", "-q"]}},
        startupProbe={"httpGet": {"port": 80}},
        lifecycle={
            "preStop": {"exec": {"command": ["stop"]}},
            "postStart": {"exec": {"command": ["start"]}},
        },
    )
    data = policy_data(pod(main))
    assert data["containers"][1]["exec_commands"] == [
        ["alive", "-q"],
        ["ready"],
        ["start"],
        ["stop"],
    ]
    assert data["containers"][0]["exec_commands"] == []


def test_gpu_limits_become_vfio_devices_and_cdi_patterns() -> None:
    main = container("main", resources={"limits": {"nvidia.com/pgpu": "2"}})
    gpu = policy_data(pod(main))["containers"][1]
    assert [d["type_"] for d in gpu["devices"]] == ["vfio-pci-gk", "vfio-pci-gk"]
    assert {d["container_path"] for d in gpu["devices"]} == {"/dev/vfio/devices/vfio"}
    assert (
        gpu["runtime_anno_patterns"]["^cdi\\.k8s\\.io/vfio[0-9]+$"] == "^nvidia\\.com/gpu=[0-9]+$"
    )


def test_empty_dir_is_an_encrypted_block_storage_with_fs_group() -> None:
    main = container("main", volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])
    data = policy_data(
        pod(main, volumes=[{"name": "scratch", "emptyDir": {}}], securityContext={"fsGroup": 3000})
    )
    workload = data["containers"][1]
    assert workload["storages"] == [
        {
            "driver": "",
            "driver_options": ["encryption_key=ephemeral", "create_filesystem"],
            "source": "",
            "fstype": "ext4",
            "options": [],
            "mount_point": "$(spath)/$(b64_device_id)",
            "fs_group": {"group_id": 3000, "group_change_policy": 0},
            "shared": True,
        }
    ]
    assert {
        "destination": "/scratch",
        "source": "",
        "type_": "bind",
        "options": ["rbind", "rprivate", "rw"],
    } in workload["OCI"]["Mounts"]
    assert 3000 in workload["OCI"]["Process"]["User"]["AdditionalGids"]


def test_sub_path_is_refused_with_a_hint() -> None:
    main = container("main", volumeMounts=[{"name": "c", "mountPath": "/c", "subPath": "x"}])
    with pytest.raises(PolicyGenerationError, match="subPath"):
        policy_data(pod(main, volumes=[{"name": "c", "configMap": {"name": "c"}}]))


def test_unknown_fields_are_kept_and_ignored() -> None:
    plain = policy_data(pod(container("main")))
    odd = policy_data(
        pod(container("main", futureField={"x": 1}), schedulerName="mine", somethingNew=[1, 2])
    )
    assert plain == odd


def test_image_user_without_explicit_ids_fails_under_guest_pull() -> None:
    main = {"name": "main", "image": APP}
    table = images(APP)
    table[APP] = facts(APP, User="app", Entrypoint=["/bin/app"])
    generator = PolicyGenerator(default_rules(), default_settings())
    with pytest.raises(PolicyGenerationError, match="runAsUser: 1000") as caught:
        generator.generate(pod(main), table)
    assert "supplementalGroups: [2000]" in str(caught.value)


def test_generation_is_idempotent_and_initdata_carries_the_policy() -> None:
    generator = PolicyGenerator(default_rules(), default_settings())
    workload = pod(container("main"))
    first = generator.generate(workload, images(APP))
    second = generator.generate(workload, images(APP))
    assert first.policy_text == second.policy_text
    assert first.policy_hash == second.policy_hash
    assert first.annotation == second.annotation
    assert decode_annotation(first.annotation) == first.initdata_toml
    assert Initdata.from_toml(first.initdata_toml).policy == first.policy_text
    assert policy_hash(first.initdata_toml).hex() == first.policy_hash
    head, data = first.policy_text.split("\npolicy_data := ", 1)
    assert head == default_rules()
    assert json.loads(data) == first.policy_data


def test_required_images_include_the_pause_image() -> None:
    generator = PolicyGenerator(default_rules(), default_settings())
    workload = pod(container("main"), initContainers=[{"name": "init", "image": "init:1"}])
    assert generator.required_images(workload) == {APP, "init:1", default_settings().pause_image}


def test_missing_image_facts_are_an_error() -> None:
    generator = PolicyGenerator(default_rules(), default_settings())
    with pytest.raises(PolicyGenerationError, match="no image facts"):
        generator.generate(pod(container("main")), {})
