"""Checks on confidential pods that end in advice, not failure (research/contrast.md §6.3).

A confidential pod runs in a VM sized from its memory limits, pulls its images into that
VM's memory on bare metal, and is measured, so settings that are harmless for a plain pod
(no memory limit, a floating tag, a CPU limit) make it fail at runtime or get refused by its
policy. Each check returns `CheckWarning`s that say what is wrong and what to do; printing them
is the caller's business.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from contrast.images.model import ImageFacts
from contrast.kuberesource.inject import INITIALIZER_NAME, SERVICE_MESH_NAME
from contrast.kuberesource.pinning import is_pinned
from contrast.kuberesource.quantity import MIB, mebibytes, parse_quantity
from contrast.kuberesource.releaseimages import IMAGE_REPOSITORY
from contrast.kuberesource.workloads import Workload, is_mapping
from contrast.platforms import PLATFORMS, Platform

GPU_RESOURCE_PREFIX = "nvidia.com/"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
DEFAULT_MEMORY_ANNOTATION = "io.katacontainers.config.hypervisor.default_memory"
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
GPU_DEFAULT_MEMORY_HINT_MIB = 8192
CONTRAST_CONTAINERS = frozenset({INITIALIZER_NAME, SERVICE_MESH_NAME})


@dataclass(frozen=True)
class CheckWarning:
    """Something a user should change: which resource, what is wrong, what to do."""

    resource: str
    message: str
    hint: str

    def explain(self) -> str:
        return f"{self.resource}: {self.message} ({self.hint})"


@dataclass(frozen=True)
class PodMemory:
    """The memory a pod's VM gets, in MiB.

    `limits_mib` is the pod's memory limit as the runtime sees it: max(Σ regular containers +
    native sidecars, largest init container + the sidecars declared before it), or the
    pod-level limit; `default_mib` is Kata's
    `default_memory` (the platform's, or the pod's annotation); the VM gets their sum.
    """

    limits_mib: int
    default_mib: int

    @property
    def vm_mib(self) -> int:
        return self.limits_mib + self.default_mib


def _resources(container: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    resources = container.get("resources")
    if not is_mapping(resources):
        return {}
    values = resources.get(kind)
    return values if is_mapping(values) else {}


def _name(container: Mapping[str, Any]) -> str:
    return str(container.get("name") or "?")


def _memory(container: Mapping[str, Any], kind: str, where: str) -> Decimal | None:
    value = _resources(container, kind).get("memory")
    if value is None:
        return None
    return parse_quantity(value, f"{where}: container {_name(container)!r} {kind}.memory")


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _pod_annotations(workload: Workload) -> Mapping[str, Any]:
    metadata = workload.pod_template.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def _pod_spec(workload: Workload) -> Mapping[str, Any]:
    spec = workload.pod_template.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _running_containers(workload: Workload) -> list[MutableMapping[str, Any]]:
    """What runs for the pod's life: the regular containers and the native sidecars."""
    return [*workload.containers(), *filter(_is_sidecar, workload.init_containers())]


def _running_memory(workload: Workload, where: str) -> Decimal:
    running = _running_containers(workload)
    return sum((_memory(c, "limits", where) or Decimal(0) for c in running), Decimal(0))


def _init_memory(workload: Workload, where: str) -> list[tuple[Mapping[str, Any], Decimal]]:
    """Each init container with what the pod needs while it runs.

    That is its own limit plus the native sidecars declared before it, which already run
    (Kubernetes' `PodLimits`, KEP-753); init containers without a limit are left out.
    """
    sidecars = Decimal(0)
    uses: list[tuple[Mapping[str, Any], Decimal]] = []
    for container in workload.init_containers():
        limit = _memory(container, "limits", where)
        if _is_sidecar(container):
            sidecars += limit or Decimal(0)
        elif limit is not None:
            uses.append((container, limit + sidecars))
    return uses


def _pod_limit(workload: Workload, where: str) -> Decimal | None:
    pod_limit = _resources(_pod_spec(workload), "limits").get("memory")
    if pod_limit is None:
        return None
    return parse_quantity(pod_limit, f"{where}: spec.resources.limits.memory")


def pod_memory(workload: Workload, platform: Platform) -> PodMemory:
    """The VM memory rule of §6.3, from the limits as written."""
    where = workload.describe()
    limits = _pod_limit(workload, where)
    if limits is None:
        largest_init = max((use for _, use in _init_memory(workload, where)), default=Decimal(0))
        limits = max(_running_memory(workload, where), largest_init)
    default = platform.default_memory_mib
    annotated = str(_pod_annotations(workload).get(DEFAULT_MEMORY_ANNOTATION) or "").strip()
    if annotated.isdigit():
        default = int(annotated)
    return PodMemory(mebibytes(limits), default)


def check_memory(workload: Workload, platform: Platform) -> list[CheckWarning]:
    """Every container needs a memory limit, and its request must equal it.

    The VM is sized by limits while the scheduler accounts requests, so a smaller request
    overcommits the node, and a container without a limit lives off the VM's default memory.
    """
    where = workload.describe()
    memory = pod_memory(workload, platform)
    warnings = []
    for container in workload.all_containers():
        name = _name(container)
        limit = _memory(container, "limits", where)
        request = _memory(container, "requests", where)
        if limit is None:
            warnings.append(
                CheckWarning(
                    where,
                    f"container {name!r} has no memory limit; the VM gets {memory.vm_mib} MiB"
                    f" ({memory.limits_mib} MiB of limits + {memory.default_mib} MiB default)",
                    "set resources.limits.memory and resources.requests.memory to the same"
                    " value, enough for the container",
                )
            )
        elif request is not None and request != limit:
            warnings.append(
                CheckWarning(
                    where,
                    f"container {name!r} requests {_mib(request)} MiB but is limited to"
                    f" {_mib(limit)} MiB; the VM takes the limit, the node accounts the request",
                    "set resources.requests.memory equal to resources.limits.memory",
                )
            )
    annotated = _pod_annotations(workload).get(DEFAULT_MEMORY_ANNOTATION)
    if annotated is not None and not str(annotated).strip().isdigit():
        warnings.append(
            CheckWarning(
                where,
                f"annotation {DEFAULT_MEMORY_ANNOTATION}={annotated!r} is not a number of MiB",
                'write the VM\'s default memory in MiB, e.g. "8192"',
            )
        )
    return warnings


def check_init_memory(workload: Workload, platform: Platform) -> list[CheckWarning]:
    """An init container that needs more memory than the running containers sizes the VM.

    Kata boots the VM with the pod's limit, the larger of the running containers' sum and each
    init container's need, and a confidential VM cannot give memory back: whatever an init
    container needs beyond the running containers is held, unused, for the pod's life. Pods
    with a pod-level limit chose their size, pods with an unlimited running container get the
    missing-limit warning instead, and Contrast's own containers are sized by Contrast.
    """
    where = workload.describe()
    if _pod_limit(workload, where) is not None:
        return []
    if any(_memory(c, "limits", where) is None for c in _running_containers(workload)):
        return []
    running = _running_memory(workload, where)
    default = pod_memory(workload, platform).default_mib
    warnings = []
    for container, use in _init_memory(workload, where):
        if use <= running or _name(container) in CONTRAST_CONTAINERS:
            continue
        warnings.append(
            CheckWarning(
                where,
                f"init container {_name(container)!r} needs {_mib(use)} MiB, more than the"
                f" {_mib(running)} MiB the running containers are limited to; the VM is sized"
                f" for it ({_mib(use)} MiB + {default} MiB default) and keeps that memory after"
                " it exits",
                f"lower its memory limit (and request) to what it needs, at most {_mib(running)}"
                f" MiB; otherwise the pod holds {_mib(use - running)} MiB it does not use",
            )
        )
    return warnings


def _mib(value: Decimal) -> str:
    return f"{value / MIB:.0f}" if value % MIB == 0 else f"{value / MIB:.1f}"


def check_cpu_limits(workload: Workload) -> list[CheckWarning]:
    """CPU limits change the VM's vCPUs at runtime, which the measurement does not cover."""
    return [
        CheckWarning(
            workload.describe(),
            f"container {_name(container)!r} sets a CPU limit, which confidential pods do not"
            " support (it breaks the measurement)",
            "remove resources.limits.cpu; requests.cpu is fine",
        )
        for container in workload.all_containers()
        if "cpu" in _resources(container, "limits")
    ]


def _images(workload: Workload) -> list[str]:
    seen: dict[str, None] = {}
    for container in workload.all_containers():
        image = container.get("image")
        if isinstance(image, str):
            seen.setdefault(image)
    return list(seen)


def check_image_sizes(
    workload: Workload, platform: Platform, images: Mapping[str, ImageFacts]
) -> list[CheckWarning]:
    """On bare metal, images are pulled into guest memory: layers compressed and unpacked.

    `images` maps the image as written in the YAML to its facts; unknown images are skipped.
    """
    if not platform.bare_metal:
        return []
    known = [images[image] for image in _images(workload) if image in images]
    needed = sum(facts.compressed_size + facts.uncompressed_size for facts in known)
    if not needed:
        return []
    memory = pod_memory(workload, platform)
    needed_mib = mebibytes(Decimal(needed))
    if needed_mib <= memory.limits_mib:
        return []
    return [
        CheckWarning(
            workload.describe(),
            f"its images take {needed_mib} MiB in guest memory (compressed + unpacked), but the"
            f" memory limits add up to {memory.limits_mib} MiB; pulling them will run out of"
            " memory",
            f"raise the containers' memory limits (and requests) by at least"
            f" {needed_mib - memory.limits_mib} MiB in total",
        )
    ]


def _gpu_requests(container: Mapping[str, Any]) -> list[str]:
    names = set(_resources(container, "limits")) | set(_resources(container, "requests"))
    return sorted(str(name) for name in names if str(name).startswith(GPU_RESOURCE_PREFIX))


def _env_names(container: Mapping[str, Any]) -> set[str]:
    env = container.get("env")
    if not isinstance(env, list):
        return set()
    return {str(entry.get("name")) for entry in env if isinstance(entry, Mapping)}


def _gpu_platform_hint(platform: Platform) -> str:
    variant = next((p for p in PLATFORMS if p.name == f"{platform.name}-gpu"), None)
    if variant is not None:
        return f"use runtime class {variant.placeholder}"
    gpu = ", ".join(p.placeholder for p in PLATFORMS if p.gpu)
    return f"use a GPU runtime class: {gpu}"


def check_gpu(workload: Workload, platform: Platform) -> list[CheckWarning]:
    """A GPU pod needs all of: a GPU platform, a device request, the CDI annotation, enough
    default memory for the driver, and `NVIDIA_VISIBLE_DEVICES` in the GPU containers."""
    where = workload.describe()
    annotations = _pod_annotations(workload)
    cdi = sorted(str(key) for key in annotations if str(key).startswith(CDI_ANNOTATION_PREFIX))
    containers = workload.all_containers()
    requests = {_name(c): _gpu_requests(c) for c in containers if _gpu_requests(c)}
    with_env = [_name(c) for c in containers if VISIBLE_DEVICES_ENV in _env_names(c)]
    if not (requests or cdi or platform.gpu):
        return []

    warnings = []

    def warn(message: str, hint: str) -> None:
        warnings.append(CheckWarning(where, message, hint))

    devices = sorted({device for found in requests.values() for device in found})
    if (requests or cdi) and not platform.gpu:
        asked = ", ".join(devices) or ", ".join(cdi)
        warn(
            f"asks for a GPU ({asked}) but runs on {platform.display_name}, which has none",
            _gpu_platform_hint(platform),
        )
    if platform.gpu and not requests:
        warn(
            f"runs on {platform.display_name} but no container requests a GPU device",
            "request one in resources.limits, e.g. nvidia.com/pgpu: 1 or"
            " nvidia.com/GH100_H100_PCIE: 1, or use the platform's runtime class without -gpu",
        )
    if requests and not cdi:
        warn(
            f"requests {', '.join(devices)} but has no {CDI_ANNOTATION_PREFIX}* annotation, so"
            " the runtime attaches no device to the VM",
            'add the pod annotation cdi.k8s.io/gpu: "nvidia.com/pgpu=0"',
        )
    if cdi and not requests:
        warn(
            f"has the annotation {cdi[0]} but no container requests a GPU device",
            "request the device in resources.limits (e.g. nvidia.com/pgpu: 1), or remove the"
            " annotation",
        )
    if requests and DEFAULT_MEMORY_ANNOTATION not in annotations:
        warn(
            f"requests a GPU without {DEFAULT_MEMORY_ANNOTATION}; the VM gets"
            f" {pod_memory(workload, platform).default_mib} MiB beyond the limits, little for"
            " the GPU driver",
            f'add the pod annotation {DEFAULT_MEMORY_ANNOTATION}: "{GPU_DEFAULT_MEMORY_HINT_MIB}"'
            " (MiB)",
        )
    for name in requests:
        if name not in with_env:
            warn(
                f"container {name!r} requests a GPU but does not set {VISIBLE_DEVICES_ENV}",
                f"add env {VISIBLE_DEVICES_ENV}=all to that container",
            )
    for name in with_env:
        if not requests:
            warn(
                f"container {name!r} sets {VISIBLE_DEVICES_ENV} but the pod requests no GPU",
                "request a GPU device, or remove the variable",
            )
    return warnings


def is_own_image(image: str) -> bool:
    """Contrast's images are pinned by the release, not by the user."""
    return image.startswith(f"{IMAGE_REPOSITORY}/")


def check_image_pinning(workload: Workload) -> list[CheckWarning]:
    """Images should name a digest: the policy allows exactly the image resolved today."""
    return [
        CheckWarning(
            workload.describe(),
            f"image {image!r} is not pinned by digest; when its tag moves, the new image no"
            " longer matches the policy and the pod is refused",
            f"pin it as {image}@sha256:<digest> (the digest generate resolved)",
        )
        for image in _images(workload)
        if not is_pinned(image) and not is_own_image(image)
    ]


def check(
    workload: Workload, platform: Platform, images: Mapping[str, ImageFacts] | None = None
) -> list[CheckWarning]:
    """All checks for one confidential pod, in a stable order."""
    warnings = check_memory(workload, platform)
    warnings += check_init_memory(workload, platform)
    warnings += check_cpu_limits(workload)
    if images is not None:
        warnings += check_image_sizes(workload, platform, images)
    warnings += check_gpu(workload, platform)
    warnings += check_image_pinning(workload)
    return warnings
