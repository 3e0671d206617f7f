"""Encrypted persistent volumes: what `secure-pv: DEVICE:MOUNT` adds to a pod, as the original.

The original (internal/kuberesource/mutators.go, `addCryptsetupConfig`) lets the Initializer do
the work: it gets the block device `DEVICE` at `/dev/csi0` (`volumeDevices`), the `emptyDir`
`MOUNT` at `/state` with `Bidirectional` propagation, `privileged` (to open a dm-crypt device and
mount it), 100 Mi of memory, and `CRYPTSETUP_DEVICE=/dev/csi0`, which tells it to stay running
after it wrote the certificates and the workload secret: it formats the device as LUKS2 with
integrity on first use (the passphrase is the workload secret, so a restart reopens it and no
other workload's secret does), opens it, mounts it on `/state`, touches `/done` and waits. That
makes it a native sidecar (`restartPolicy: Always`) whose startup probe waits for `/done`, so the
app containers start only once the volume is mounted; they see it through their own mount of
`MOUNT` with `HostToContainer` propagation, which is checked here, since without it they would
write to an empty in-memory directory and lose everything at the next restart.

The devices are checked as the original checks them: `DEVICE` is a pod volume backed by a PVC or
an iSCSI disk, or a StatefulSet's volume claim template (which must then be a `Block` volume).
`cryptsetup.py` beside the Initializer holds the commands it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from contrast.initializer import cryptsetup
from contrast.kuberesource.knownannotations import parse_secure_pv
from contrast.kuberesource.releaseimages import PYTHON
from contrast.kuberesource.workloads import CONTRAST_ANNOTATION_PREFIX, ResourceError, Workload

SECURE_PV_ANNOTATION = f"{CONTRAST_ANNOTATION_PREFIX}secure-pv"
CRYPTSETUP_DEVICE_ENV = cryptsetup.DEVICE_ENV
DEVICE_PATH = "/dev/csi0"
STATE_PATH = str(cryptsetup.STATE_PATH)
DONE_FILE = str(cryptsetup.DONE_FILE)
MEMORY = "100Mi"
# The original probes with `/bin/test -f /done`; the release images have Python, not coreutils.
DONE_PROBE = (PYTHON, "-c", f"import os, sys; sys.exit(not os.path.exists({DONE_FILE!r}))")
CONSUMER_PROPAGATIONS = ("HostToContainer", "Bidirectional")


class SecurePvError(ResourceError):
    """A `secure-pv` annotation the pod cannot honour as it is written."""


@dataclass(frozen=True)
class SecurePv:
    """The annotation's two volume names."""

    device: str
    mount: str

    @classmethod
    def from_workload(cls, workload: Workload) -> SecurePv | None:
        value = workload.annotation(SECURE_PV_ANNOTATION)
        if value is None:
            return None
        parsed = parse_secure_pv(value)
        if parsed is None:  # the annotation table refuses it first; kept for direct callers
            raise SecurePvError(
                f"{workload.describe()}: annotation {SECURE_PV_ANNOTATION}={value!r} is not"
                " DEVICE:MOUNT",
                hint="name the block device volume and the emptyDir, e.g. state:share",
            )
        return cls(*parsed)


def _named(items: Any, name: str) -> Mapping[str, Any] | None:
    for item in items if isinstance(items, list) else ():
        if isinstance(item, Mapping) and item.get("name") == name:
            return item
    return None


def check_device(workload: Workload, device: str) -> None:
    """`device` is a PVC or iSCSI volume of the pod, or a Block volume claim template."""
    where = workload.describe()
    volume = _named(workload.pod_spec.get("volumes"), device)
    if volume is not None:
        if "persistentVolumeClaim" not in volume and "iscsi" not in volume:
            raise SecurePvError(
                f"{where}: secure-pv device {device!r} must reference a PVC or iSCSI device",
                hint="the Initializer encrypts a block device; use a persistentVolumeClaim or"
                " iscsi volume, or a volumeClaimTemplate with volumeMode: Block",
            )
        return
    if workload.kind == "StatefulSet":
        spec = workload.resource.get("spec")
        templates = spec.get("volumeClaimTemplates") if isinstance(spec, Mapping) else None
        for template in templates if isinstance(templates, list) else ():
            metadata = template.get("metadata") if isinstance(template, Mapping) else None
            if isinstance(metadata, Mapping) and metadata.get("name") == device:
                claim = template.get("spec")
                mode = claim.get("volumeMode") if isinstance(claim, Mapping) else None
                if mode != "Block":
                    raise SecurePvError(
                        f"{where}: secure-pv device {device!r} is a volume claim template with"
                        f" volumeMode {mode or 'Filesystem'!s}",
                        hint="set volumeMode: Block; the Initializer formats the raw device",
                    )
                return
    raise SecurePvError(
        f"{where}: secure-pv device {device!r} not found",
        hint="add a volume of that name (persistentVolumeClaim or iscsi) or a volumeClaimTemplate",
    )


def ensure_mount_volume(workload: Workload, mount: str) -> bool:
    """The `emptyDir` the decrypted volume is mounted on; added (in memory) when missing."""
    volumes = workload.pod_spec.get("volumes")
    if volumes is None:
        volumes = workload.pod_spec["volumes"] = []
    if not isinstance(volumes, list):
        raise SecurePvError(f"{workload.describe()}: spec.volumes is not a list")
    volume = _named(volumes, mount)
    if volume is None:
        volumes.append({"name": mount, "emptyDir": {"medium": "Memory"}})
        return True
    if "emptyDir" not in volume:
        raise SecurePvError(
            f"{workload.describe()}: secure-pv mount volume {mount!r} is not an emptyDir",
            hint="the Initializer mounts the decrypted device on an emptyDir of that name",
        )
    return False


def check_consumers(workload: Workload, mount: str, initializer: str) -> None:
    """Every other container mounting `mount` sees the decrypted device (HostToContainer)."""
    for container in workload.all_containers():
        if container.get("name") == initializer:
            continue
        for volume_mount in container.get("volumeMounts") or []:
            if not isinstance(volume_mount, Mapping) or volume_mount.get("name") != mount:
                continue
            if volume_mount.get("mountPropagation") not in CONSUMER_PROPAGATIONS:
                raise SecurePvError(
                    f"{workload.describe()}: container {container.get('name')!r} mounts the"
                    f" secure-pv volume {mount!r} without mountPropagation: HostToContainer",
                    hint="without it the container sees an empty in-memory directory, not the"
                    " encrypted volume; add mountPropagation: HostToContainer",
                )


def configure_initializer(container: MutableMapping[str, Any], pv: SecurePv) -> None:
    """Give the Initializer `container` what it needs to set up the volume (idempotent)."""
    env = container.setdefault("env", [])
    env[:] = [e for e in env if e.get("name") != CRYPTSETUP_DEVICE_ENV]
    env.append({"name": CRYPTSETUP_DEVICE_ENV, "value": DEVICE_PATH})
    container["volumeDevices"] = [{"name": pv.device, "devicePath": DEVICE_PATH}]
    mounts = container.setdefault("volumeMounts", [])
    mounts[:] = [m for m in mounts if m.get("mountPath") != STATE_PATH]
    mounts.append({"name": pv.mount, "mountPath": STATE_PATH, "mountPropagation": "Bidirectional"})
    security = dict(container.get("securityContext") or {})
    security["privileged"] = True
    container["securityContext"] = security
    container["resources"] = {"limits": {"memory": MEMORY}, "requests": {"memory": MEMORY}}
    container["restartPolicy"] = "Always"
    container["startupProbe"] = {
        "exec": {"command": list(DONE_PROBE)},
        "periodSeconds": 5,
        "failureThreshold": 20,
    }


def prepare(workload: Workload, initializer: str) -> SecurePv | None:
    """Check the pod for its `secure-pv` annotation and add the mount volume; None without one."""
    pv = SecurePv.from_workload(workload)
    if pv is None:
        return None
    check_device(workload, pv.device)
    ensure_mount_volume(workload, pv.mount)
    check_consumers(workload, pv.mount, initializer)
    return pv
