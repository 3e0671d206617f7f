"""Checks fire on what a confidential pod gets wrong, and stay silent on a well-prepared one."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from contrast.images.model import ImageConfig, ImageFacts
from contrast.kuberesource import checks, inject, yamlio
from contrast.kuberesource.checks import CheckWarning, pod_memory
from contrast.kuberesource.quantity import QuantityError
from contrast.kuberesource.workloads import Workload
from contrast.platforms import by_name

from .builders import resource

TESTDATA = Path(__file__).parent / "testdata"
SNP = by_name("metal-qemu-snp")
SNP_GPU = by_name("metal-qemu-snp-gpu")
AKS = by_name("aks-clh-snp")
PINNED = "ghcr.io/example/app@sha256:" + "1" * 64
MIB = 1024 * 1024


def container(name: str = "app", memory: str | None = "100Mi", **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"name": name, "image": PINNED}
    if memory is not None:
        result["resources"] = {"limits": {"memory": memory}, "requests": {"memory": memory}}
    result.update(extra)
    return result


def pod(*containers: dict[str, Any], **spec: Any) -> Workload:
    return Workload(resource("Pod", {"containers": list(containers), **spec}), "app.yml")


def messages(warnings: list[CheckWarning]) -> list[str]:
    return [warning.message for warning in warnings]


def test_a_prepared_pod_gets_no_warnings() -> None:
    workload = pod(container())
    inject.inject(workload, coordinator_namespace="default")
    assert checks.check(workload, SNP, {}) == []


def test_our_injected_containers_and_the_coordinator_pass() -> None:
    resources = yamlio.load(TESTDATA / "multi-runtime.yml")
    coordinator, snp_app = resources.workloads()[:2]
    inject.inject(snp_app, coordinator_namespace="contrast")
    assert checks.check(coordinator, SNP) == []
    assert checks.check(snp_app, SNP) == []


@pytest.mark.parametrize(
    ("containers", "spec", "annotations", "limits", "default"),
    [
        # The table of research/contrast.md §6.3: main 100, init 200 → 712M; sidecar → 812M.
        ([container(memory="100M")], {"initContainers": [container("i", "200M")]}, {}, 191, 512),
        ([container()], {"initContainers": [container("i", "200Mi")]}, {}, 200, 512),
        (
            [container()],
            {"initContainers": [container("s", "200Mi", restartPolicy="Always")]},
            {},
            300,
            512,
        ),
        ([container()], {"initContainers": [container("s", None, restartPolicy="Always")]}, {},
         100, 512),
        # Kubernetes' PodLimits (KEP-753): an init container runs beside the native sidecars
        # started before it, so 200 Mi of sidecar + 300 Mi of init container = 500 Mi.
        (
            [container()],
            {"initContainers": [container("s", "200Mi", restartPolicy="Always"),
                                container("i", "300Mi")]},
            {},
            500,
            512,
        ),
        ([container(), container("b", "1Gi")], {}, {}, 1124, 512),
        ([container()], {"resources": {"limits": {"memory": "2Gi"}}}, {}, 2048, 512),
        ([container()], {}, {"io.katacontainers.config.hypervisor.default_memory": "8192"}, 100,
         8192),
    ],
)  # fmt: skip
def test_vm_memory(
    containers: list[dict[str, Any]],
    spec: dict[str, Any],
    annotations: dict[str, str],
    limits: int,
    default: int,
) -> None:
    workload = Workload(
        resource("Pod", {"containers": containers, **spec}, annotations=annotations)
    )
    memory = pod_memory(workload, SNP)
    assert (memory.limits_mib, memory.default_mib) == (limits, default)
    assert memory.vm_mib == limits + default


def test_gpu_platform_default_memory() -> None:
    assert pod_memory(pod(container()), SNP_GPU).vm_mib == 100 + 1024


def test_missing_limit_and_unequal_request() -> None:
    unequal = container("b")
    unequal["resources"]["requests"]["memory"] = "50Mi"
    workload = pod(container("a", None), unequal)
    warnings = checks.check_memory(workload, SNP)
    assert messages(warnings) == [
        "container 'a' has no memory limit; the VM gets 612 MiB (100 MiB of limits + 512 MiB"
        " default)",
        "container 'b' requests 50 MiB but is limited to 100 MiB; the VM takes the limit, the"
        " node accounts the request",
    ]
    assert all(w.resource == "app.yml: Pod/app" and w.hint for w in warnings)
    assert "resources.limits.memory" in warnings[0].hint
    assert warnings[0].explain().startswith("app.yml: Pod/app: container 'a'")


def test_request_omitted_defaults_to_the_limit() -> None:
    only_limit = container("a", None, resources={"limits": {"memory": "1Gi"}})
    assert checks.check_memory(pod(only_limit), SNP) == []


def test_bad_quantities_are_errors() -> None:
    with pytest.raises(QuantityError, match=r"container 'a' limits\.memory"):
        checks.check_memory(pod(container("a", "lots")), SNP)
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        checks.check_memory(pod(container("a", "1Gb")), SNP)


def test_bad_default_memory_annotation() -> None:
    workload = Workload(
        resource(
            "Pod",
            {"containers": [container()]},
            annotations={"io.katacontainers.config.hypervisor.default_memory": "8Gi"},
        )
    )
    assert messages(checks.check_memory(workload, SNP)) == [
        "annotation io.katacontainers.config.hypervisor.default_memory='8Gi' is not a number of MiB"
    ]


def test_cpu_limits() -> None:
    with_cpu = container()
    with_cpu["resources"]["limits"]["cpu"] = "1"
    with_request = container("b")
    with_request["resources"]["requests"]["cpu"] = "1"
    assert messages(checks.check_cpu_limits(pod(with_cpu, with_request))) == [
        "container 'app' sets a CPU limit, which confidential pods do not support (it breaks the"
        " measurement)"
    ]


def facts(reference: str, compressed_mib: int, uncompressed_mib: int) -> ImageFacts:
    return ImageFacts(
        reference=reference,
        digest="sha256:" + "1" * 64,
        config=ImageConfig(),
        compressed_size=compressed_mib * MIB,
        uncompressed_size=uncompressed_mib * MIB,
    )


def test_image_sizes_on_bare_metal() -> None:
    workload = pod(container("a", "100Mi"), container("b", "100Mi"))  # the same image twice
    small = {PINNED: facts(PINNED, 40, 150)}
    large = {PINNED: facts(PINNED, 80, 300)}
    assert checks.check_image_sizes(workload, SNP, small) == []
    (warning,) = checks.check_image_sizes(workload, SNP, large)
    assert warning.message.startswith("its images take 380 MiB in guest memory")
    assert "add up to 200 MiB" in warning.message
    assert "by at least 180 MiB" in warning.hint
    # Not on AKS (layers stay on the host), and unknown images are skipped.
    assert checks.check_image_sizes(workload, AKS, large) == []
    assert checks.check_image_sizes(workload, SNP, {"other:1": facts("other:1", 900, 900)}) == []
    assert messages(checks.check(workload, SNP, large)) == [warning.message]


def test_unpinned_images_but_not_ours() -> None:
    workload = pod(
        container("a", image="nginx:1.27"),
        container("b", image="nginx:1.27"),
        container("c", image=PINNED),
    )
    inject.inject(workload, coordinator_namespace="default")  # our Initializer is not pinned
    assert messages(checks.check_image_pinning(workload)) == [
        "image 'nginx:1.27' is not pinned by digest; when its tag moves, the new image no longer"
        " matches the policy and the pod is refused"
    ]


def gpu_example() -> Workload:
    (workload,) = yamlio.load(TESTDATA / "gpu-pod.yml").workloads()
    return workload


def test_gpu_example_passes() -> None:
    workload = gpu_example()
    inject.inject(workload, coordinator_namespace="default")
    assert checks.check(workload, SNP_GPU) == []
    # The Initializer runs before the app: it counts through the max rule, not the sum.
    assert pod_memory(workload, SNP_GPU).vm_mib == 16384 + 16384


def test_injected_sidecar_counts_towards_vm_memory() -> None:
    annotations = {"contrast.edgeless.systems/servicemesh-ingress": ""}
    workload = Workload(resource("Pod", {"containers": [container()]}, annotations=annotations))
    inject.inject(workload, coordinator_namespace="default")
    assert pod_memory(workload, SNP).limits_mib == 100 + 100


def strip(workload: Workload, what: str) -> Workload:
    container = workload.containers()[0]
    if what == "cdi":
        del workload.pod_annotations["cdi.k8s.io/gpu"]
    elif what == "default_memory":
        del workload.pod_annotations["io.katacontainers.config.hypervisor.default_memory"]
    elif what == "device":
        del container["resources"]["limits"]["nvidia.com/GH100_H100_PCIE"]
    elif what == "env":
        del container["env"]
    return workload


@pytest.mark.parametrize(
    ("what", "platform", "expected"),
    [
        ("cdi", SNP_GPU, ["has no cdi.k8s.io/* annotation"]),
        ("default_memory", SNP_GPU, ["without io.katacontainers.config.hypervisor.default_memory"]),
        (
            "device",
            SNP_GPU,
            [
                "no container requests a GPU device",
                "has the annotation cdi.k8s.io/gpu but no container requests",
                "sets NVIDIA_VISIBLE_DEVICES but the pod requests no GPU",
            ],
        ),
        ("env", SNP_GPU, ["container 'cuda-vectoradd' requests a GPU but does not set"]),
        (
            "nothing",
            SNP,
            ["asks for a GPU (nvidia.com/GH100_H100_PCIE) but runs on Metal-QEMU-SNP"],
        ),
    ],
)
def test_gpu_warnings(what: str, platform: Any, expected: list[str]) -> None:
    warnings = checks.check_gpu(strip(gpu_example(), what), platform)
    assert len(warnings) == len(expected), messages(warnings)
    for warning, fragment in zip(warnings, expected, strict=True):
        assert fragment in warning.message
        assert warning.hint
    if what == "nothing":
        assert warnings[0].hint == "use runtime class contrast-cc-metal-qemu-snp-gpu"


def test_gpu_request_on_a_platform_without_a_gpu_variant() -> None:
    workload = gpu_example()
    (warning,) = checks.check_gpu(workload, AKS)
    assert "contrast-cc-metal-qemu-snp-gpu" in warning.hint
    assert "contrast-cc-metal-qemu-tdx-gpu" in warning.hint


def test_gpu_platform_without_any_gpu_setting() -> None:
    assert messages(checks.check_gpu(pod(container()), SNP_GPU)) == [
        "runs on Metal-QEMU-SNP-GPU but no container requests a GPU device"
    ]
    assert checks.check_gpu(pod(container()), SNP) == []


def test_checks_change_nothing() -> None:
    resources = yamlio.load(TESTDATA / "kustomize-build.yml")
    for workload in resources.workloads():
        before = copy.deepcopy(yamlio.to_plain(workload.resource))
        checks.check(workload, SNP, {})
        assert yamlio.to_plain(workload.resource) == before
    assert not resources.changed


def test_kustomize_example_warnings() -> None:
    deployment, cronjob = yamlio.load(TESTDATA / "kustomize-build.yml").workloads()
    assert messages(checks.check(deployment, SNP)) == [
        "image 'docker.io/library/nginx:1.27' is not pinned by digest; when its tag moves, the"
        " new image no longer matches the policy and the pod is refused"
    ]
    assert checks.check(cronjob, SNP) == []


def init_pod(*init: dict[str, Any], app: str = "256Mi", **spec: Any) -> Workload:
    return pod(container("app", app), initContainers=list(init), **spec)


def test_large_init_container_memory_is_a_warning() -> None:
    # Seed 002: the VM is sized from the largest init container and the sum of the app's
    # containers, and a confidential VM keeps that memory after the init container exits.
    workload = init_pod(container("migrate", "1Gi"), container("small", "64Mi"))
    (warning,) = checks.check_init_memory(workload, SNP)
    assert warning.message == (
        "init container 'migrate' needs 1024 MiB, more than the 256 MiB the running containers"
        " are limited to; the VM is sized for it (1024 MiB + 512 MiB default) and keeps that"
        " memory after it exits"
    )
    assert "768 MiB" in warning.hint
    assert warning in checks.check(workload, SNP)


def test_init_container_memory_counts_the_sidecars_before_it() -> None:
    sidecar = container("proxy", "128Mi", restartPolicy="Always")
    # 200 + 128 (sidecar running beside it) > 256 + 128 is false: no warning …
    assert checks.check_init_memory(init_pod(sidecar, container("init", "200Mi")), SNP) == []
    # … but the sidecar declared before it adds to what it needs.
    workload = init_pod(sidecar, container("init", "300Mi"))
    (warning,) = checks.check_init_memory(workload, SNP)
    assert "needs 428 MiB, more than the 384 MiB" in warning.message


@pytest.mark.parametrize(
    "workload",
    [
        init_pod(container("init", "256Mi")),  # as large as the app: sizes nothing
        init_pod(container("init", None)),  # no limit: the missing-limit warning says it
        init_pod(container("init", "1Gi"), app=None),  # the app has no limit: likewise
        # A pod-level limit sizes the VM on purpose.
        init_pod(container("init", "1Gi"), resources={"limits": {"memory": "2Gi"}}),
    ],
    ids=["equal", "init without limit", "app without limit", "pod-level limit"],
)
def test_init_container_memory_without_warning(workload: Workload) -> None:
    assert checks.check_init_memory(workload, SNP) == []


def test_our_initializer_never_gets_the_init_memory_warning() -> None:
    # The Initializer's 50 Mi is fixed by Contrast; a tiny app is not the user's mistake here.
    workload = pod(container("app", "32Mi"))
    inject.inject(workload, coordinator_namespace="default")
    assert checks.check_init_memory(workload, SNP) == []
