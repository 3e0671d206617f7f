"""The secure image store (`generate --inject-image-store`), as the original injects it.

The original (internal/kuberesource/mutators.go, `AddImageStore`; docs: how-to
secure-image-store) gives every confidential pod an ephemeral block volume `image-store`
(`volumeMode: Block`, `ReadWriteOnce`, 10Gi unless the pod's `image-store-size` annotation says
otherwise, none when it says `"0"`) and a privileged native sidecar `pvc-holder` (50 Mi, the
Initializer's image, holding still) that binds the volume at `/dev/image_store`. A device of that
name in the pod VM is what the guest looks for: it formats it with LUKS2 and integrity under a
key made inside the VM and never kept, and pulls the pod's images onto it instead of into
encrypted memory. The sidecar is first among the init containers, the volume last among the
volumes. Its policy is computed like every other container's: it admits exactly this container
(the Initializer's image and command, privileged, the one device at `/dev/image_store`).

Where this release differs, and why:
- the sidecar holds still with the image's Python (`debugshell.HOLD`): the release images have no
  shell, and the original's `/bin/sh -c "sleep inf"` would not start;
- a re-run updates what an earlier run injected (another size, `"0"` removes it), where the
  original keeps a `pvc-holder` it finds as it is, so that the how-to's "change the annotation
  and rerun generate" takes effect; and, like `--insecure-enable-debug-shell-access`, a run
  without the flag removes what a run with it added, so the output depends on this run's flags;
- a pod that binds `/dev/image_store` in a container of its own (the how-to's manual setup) and
  is not annotated `"0"` is refused with the flag instead of getting a second holder for the same
  device.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from contrast.kuberesource.checks import CheckWarning
from contrast.kuberesource.debugshell import HOLD
from contrast.kuberesource.knownannotations import image_store_size_problem
from contrast.kuberesource.release import INITIALIZER_IMAGE
from contrast.kuberesource.workloads import CONTRAST_ANNOTATION_PREFIX, ResourceError, Workload

SIZE_ANNOTATION = f"{CONTRAST_ANNOTATION_PREFIX}image-store-size"
CONTAINER = "pvc-holder"
VOLUME = "image-store"
DEVICE_PATH = "/dev/image_store"
DEFAULT_SIZE = "10Gi"
DISABLED = "0"
MEMORY = "50Mi"


class ImageStoreError(ResourceError):
    """An image store that cannot be injected into a pod as it is written."""


def wanted_size(workload: Workload) -> str | None:
    """The size of the pod's store, or None when its annotation disables it."""
    value = workload.annotation(SIZE_ANNOTATION)
    if value is None or not value.strip():
        return DEFAULT_SIZE
    text = value.strip()
    problem = image_store_size_problem(text)
    if problem is not None:  # the annotation table refuses it first; kept for direct callers
        raise ImageStoreError(
            f"{workload.describe()}: annotation {SIZE_ANNOTATION}={value!r} {problem}",
            hint='a size such as 10Gi or 250Gi, or "0" for none',
        )
    return None if text == DISABLED else text


def container() -> dict[str, Any]:
    """The sidecar that binds the volume at /dev/image_store for the life of the pod."""
    return {
        "name": CONTAINER,
        "image": INITIALIZER_IMAGE,
        "command": list(HOLD),
        "restartPolicy": "Always",
        "securityContext": {"privileged": True},
        "resources": {"limits": {"memory": MEMORY}, "requests": {"memory": MEMORY}},
        "volumeDevices": [{"devicePath": DEVICE_PATH, "name": VOLUME}],
    }


def volume(size: str) -> dict[str, Any]:
    """The ephemeral block volume: a fresh claim per pod, deleted with it."""
    claim = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
        "volumeMode": "Block",
    }
    return {"name": VOLUME, "ephemeral": {"volumeClaimTemplate": {"spec": claim}}}


def _list(spec: MutableMapping[str, Any], key: str, workload: Workload) -> list[Any]:
    items = spec.get(key)
    if items is None:
        items = spec[key] = []
    if not isinstance(items, list):
        raise ImageStoreError(f"{workload.describe()}: spec.{key} is not a list")
    return items


def _named(items: list[Any], name: str) -> list[Any]:
    return [item for item in items if isinstance(item, Mapping) and item.get("name") == name]


def _own_binders(workload: Workload) -> list[str]:
    """The user's containers that bind /dev/image_store (the how-to's manual setup)."""
    names = []
    for entry in workload.all_containers():
        if entry.get("name") == CONTAINER:
            continue
        for device in entry.get("volumeDevices") or []:
            if isinstance(device, Mapping) and device.get("devicePath") == DEVICE_PATH:
                names.append(str(entry.get("name")))
    return names


def inject(workload: Workload) -> bool:
    """Give the pod its store as its annotation asks (none for `"0"`); whether it changed."""
    size = wanted_size(workload)
    if size is None:
        return remove(workload)
    own = _own_binders(workload)
    if own:
        raise ImageStoreError(
            f"{workload.describe()}: container {own[0]!r} already binds {DEVICE_PATH}"
            " (a manual image store), and --inject-image-store would add another",
            hint=f'annotate the pod {SIZE_ANNOTATION}: "0" to keep the manual one',
        )
    spec = workload.pod_spec
    init_containers = _list(spec, "initContainers", workload)
    volumes = _list(spec, "volumes", workload)
    wanted_container, wanted_volume = container(), volume(size)
    if (
        init_containers[:1] == [wanted_container]
        and _named(init_containers, CONTAINER) == [wanted_container]
        and _named(volumes, VOLUME) == [wanted_volume]
    ):
        return False
    if any("ephemeral" not in v for v in _named(volumes, VOLUME)):
        raise ImageStoreError(
            f"{workload.describe()}: the pod has a volume {VOLUME!r} of its own, which the image"
            " store would replace",
            hint=f'rename that volume, or annotate the pod {SIZE_ANNOTATION}: "0"',
        )
    init_containers[:] = [wanted_container, *_without(init_containers, CONTAINER)]
    at = next((i for i, v in enumerate(volumes) if _named([v], VOLUME)), len(volumes))
    volumes[:] = [*_without(volumes[:at], VOLUME), wanted_volume, *_without(volumes[at:], VOLUME)]
    return True


def _without(items: list[Any], name: str) -> list[Any]:
    return [item for item in items if not (isinstance(item, Mapping) and item.get("name") == name)]


def remove(workload: Workload) -> bool:
    """Take out a store an earlier run injected (its `pvc-holder`); whether it was there."""
    spec = workload.pod_spec
    init_containers = spec.get("initContainers")
    if not isinstance(init_containers, list) or not _named(init_containers, CONTAINER):
        return False
    kept = _without(init_containers, CONTAINER)
    if kept:
        init_containers[:] = kept
    else:  # the list `inject` made for it
        del spec["initContainers"]
    volumes = spec.get("volumes")
    if isinstance(volumes, list):
        remaining = [v for v in volumes if not (_named([v], VOLUME) and "ephemeral" in v)]
        if remaining:
            volumes[:] = remaining
        else:
            del spec["volumes"]
    return True


def unused_size(workload: Workload) -> CheckWarning | None:
    """A size annotation on a run without --inject-image-store (where it does nothing)."""
    value = workload.annotation(SIZE_ANNOTATION)
    if value is None or value.strip() in ("", DISABLED):
        return None
    return CheckWarning(
        workload.describe(),
        f"{SIZE_ANNOTATION} does nothing without --inject-image-store",
        "pass --inject-image-store to give the pod its image store, or remove the annotation",
    )
