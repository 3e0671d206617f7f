"""The requests a Kata agent would receive, built from the OCI spec containerd hands runc.

In a Kata pod the shim rewrites containerd's spec for the guest before it sends CreateContainer
(kata_agent.go `constrainGRPCSpec`, `handleShm`, the shared-directory mounts of container.go;
research/kata-agent-policy-inputs.md §3, §4): hooks are dropped (they ran on the host), seccomp
is not passed (`disable_guest_seccomp`), the network and cgroup namespaces are the host's
business and the other namespaces lose their paths, the PID namespace becomes `sandbox_pidns`,
device and block-I/O cgroup limits are not passed, the root file system is the guest's
`/run/kata-containers/<id>/rootfs`, `/dev/shm` is the sandbox's shared memory, and every bind
mount of a host file or directory (what kubelet writes: hosts, resolv.conf, service-account
tokens, volumes) is shared into the guest under `/run/kata-containers/shared/containers/` with a
per-mount random part. The same is done here, so the policy that `generate` wrote for a Kata
guest judges what this node was asked to run.

What does not apply without a VM is stated where it is decided: an emptyDir is a host directory
here, presented to the policy as the encrypted block volume Contrast's Kata would attach.
"""

from __future__ import annotations

import base64
import os
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contrast.emulatedruntime.node import EmulatedRuntimeError

GUEST_ROOT = "/run/kata-containers"
SHARED_DIR = f"{GUEST_ROOT}/shared/containers"
SANDBOX_SHM = f"{GUEST_ROOT}/sandbox/shm"
STORAGE_DIR = f"{GUEST_ROOT}/sandbox/storage"
EPHEMERAL_DIR = f"{GUEST_ROOT}/sandbox/ephemeral"
# containerd's default state directory: Kata reports the bundle below it, and the policies say so.
BUNDLE_ROOT = "/run/containerd/io.containerd.runtime.v2.task"
# CRI's default shared-memory size (64 MiB), which the sandbox's shm storage carries.
SHM_SIZE = 64 * 1024 * 1024

CRI_CONTAINER_TYPE = "io.kubernetes.cri.container-type"
CRI_SANDBOX_ID = "io.kubernetes.cri.sandbox-id"
CRI_SANDBOX_NAME = "io.kubernetes.cri.sandbox-name"
CRI_IMAGE_NAME = "io.kubernetes.cri.image-name"
KATA_CONTAINER_TYPE = "io.katacontainers.pkg.oci.container_type"
KATA_BUNDLE_PATH = "io.katacontainers.pkg.oci.bundle_path"
NETNS_ANNOTATION = "nerdctl/network-namespace"
# Annotations the Kata runtime consumes on the host (hypervisor settings, initdata); containerd
# copies them into every container's spec (`pod_annotations`), the guest never sees them.
HOST_ANNOTATION_PREFIX = "io.katacontainers.config."

# Bind sources that are the host's own file systems: Kata passes them through unshared.
_SYSTEM_PREFIXES = ("/dev/", "/sys/", "/proc/")
# kubelet volumes Kata shares through its "watchable" directory (updated in place).
_WATCHABLE = ("kubernetes.io~configmap", "kubernetes.io~secret", "kubernetes.io~projected",
              "kubernetes.io~downward-api")  # fmt: skip
_EMPTY_DIR = "kubernetes.io~empty-dir"
_CAPABILITY_KINDS = (
    ("bounding", "Bounding"), ("effective", "Effective"), ("inheritable", "Inheritable"),
    ("permitted", "Permitted"), ("ambient", "Ambient"),
)  # fmt: skip


class SpecError(EmulatedRuntimeError):
    """An OCI spec this runtime cannot turn into an agent request."""


def random_part() -> str:
    """The 16 hex digits Kata puts between the container id and a shared file's name."""
    return os.urandom(8).hex()


def container_type(spec: Mapping[str, Any]) -> str:
    """CRI's `sandbox` or `container` (a spec without it is not a Kubernetes pod's)."""
    value = _annotations(spec).get(CRI_CONTAINER_TYPE)
    if value not in ("sandbox", "container"):
        raise SpecError(
            f"the container's spec has no {CRI_CONTAINER_TYPE} annotation of sandbox or container",
            hint="the emulated confidential runtime runs Kubernetes pods (containerd's CRI)",
        )
    return str(value)


def sandbox_id(spec: Mapping[str, Any], container_id: str) -> str:
    """The pod's sandbox id: the pause container's own id, or what CRI says for the others."""
    if container_type(spec) == "sandbox":
        return container_id
    value = _annotations(spec).get(CRI_SANDBOX_ID)
    if not isinstance(value, str) or not value:
        raise SpecError(f"the container's spec has no {CRI_SANDBOX_ID} annotation")
    return value


def bundle_path(bundle: str, container_id: str) -> str:
    """What Kata reports as the bundle: containerd's default state path, same namespace."""
    namespace = posixpath.basename(posixpath.dirname(posixpath.normpath(bundle))) or "default"
    return f"{BUNDLE_ROOT}/{namespace}/{container_id}"


def create_sandbox_request(spec: Mapping[str, Any], container_id: str) -> dict[str, Any]:
    """CreateSandboxRequest: the sandbox's hostname and its shared-memory storage."""
    return {
        "hostname": str(spec.get("hostname", "")),
        "dns": [],
        "storages": [_shm_storage()],
        "sandbox_pidns": False,
        "sandbox_id": container_id,
        "guest_hook_path": "",
        "kernel_modules": [],
    }


def create_container_request(
    spec: Mapping[str, Any],
    container_id: str,
    *,
    bundle: str,
    device_number: Callable[[str], int] | None = None,
    random: Callable[[], str] = random_part,
    is_tmpfs: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """CreateContainerRequest for `spec` as the Kata shim would send it.

    `device_number` gives the block device number of an emptyDir volume by its host directory
    (one per volume of the sandbox, the same in every container that mounts it, as Kata attaches
    one device per volume); `random` the shared files' random parts; `is_tmpfs` whether a host
    directory is a tmpfs (an emptyDir of medium Memory; default: the node's mount table).
    """
    is_tmpfs = is_tmpfs or on_tmpfs
    process = spec.get("process")
    if not isinstance(process, Mapping):
        raise SpecError("the container's spec has no process")
    linux = _mapping(spec.get("linux"))
    sandbox = container_type(spec) == "sandbox"
    root_path = f"{GUEST_ROOT}/{container_id}/rootfs"
    mounts, storages = _mounts(spec, container_id, device_number, random, is_tmpfs)
    namespaces, sandbox_pidns = _namespaces(linux.get("namespaces"))
    annotations = _request_annotations(spec, container_id, bundle=bundle, sandbox=sandbox)
    if not sandbox:
        storages.insert(0, _guest_pull_storage(annotations.get(CRI_IMAGE_NAME, ""), root_path))
    oci = {
        "Version": str(spec.get("ociVersion", "")),
        "Process": oci_process(process),
        "Root": {"Path": root_path, "Readonly": bool(_mapping(spec.get("root")).get("readonly"))},
        "Hostname": str(spec.get("hostname", "")),
        "Mounts": mounts,
        "Hooks": None,  # run on the host; Kata does not pass them either
        "Annotations": annotations,
        "Linux": {
            "UIDMappings": [_id_mapping(m) for m in _list(linux.get("uidMappings"))],
            "GIDMappings": [_id_mapping(m) for m in _list(linux.get("gidMappings"))],
            "Sysctl": dict(_mapping(linux.get("sysctl"))),
            "Resources": _resources(_mapping(linux.get("resources"))),
            "CgroupsPath": str(linux.get("cgroupsPath", "")),
            "Namespaces": namespaces,
            "Devices": [_device(d) for d in _list(linux.get("devices"))],
            "Seccomp": None,  # disable_guest_seccomp, Kata's default
            "RootfsPropagation": str(linux.get("rootfsPropagation", "")),
            "MaskedPaths": list(_list(linux.get("maskedPaths"))),
            "ReadonlyPaths": list(_list(linux.get("readonlyPaths"))),
            "MountLabel": "",  # no SELinux in the guest
            "IntelRdt": None,
        },
    }
    return {
        "container_id": container_id,
        "exec_id": container_id,
        "string_user": None,
        "devices": [],
        "storages": storages,
        "OCI": oci,
        "sandbox_pidns": sandbox_pidns,
        "shared_mounts": [],
    }


def exec_process_request(
    process: Mapping[str, Any], container_id: str, exec_id: str
) -> dict[str, Any]:
    """ExecProcessRequest for `kubectl exec`: the process.json containerd wrote for runc exec.

    Kata's rules demand `Capabilities` null: the agent gives an exec the container's own.
    """
    converted = oci_process(process)
    converted["Capabilities"] = None
    return {
        "container_id": container_id,
        "exec_id": exec_id,
        "string_user": None,
        "process": converted,
    }


def oci_process(process: Mapping[str, Any]) -> dict[str, Any]:
    """An OCI `process` object in the agent's field names."""
    user = _mapping(process.get("user"))
    capabilities = process.get("capabilities")
    return {
        "Terminal": bool(process.get("terminal", False)),
        "ConsoleSize": None,
        "User": {
            "UID": int(user.get("uid", 0)),
            "GID": int(user.get("gid", 0)),
            "AdditionalGids": [int(g) for g in _list(user.get("additionalGids"))],
            "Username": str(user.get("username", "")),
        },
        "Args": [str(a) for a in _list(process.get("args"))],
        "Env": [str(e) for e in _list(process.get("env"))],
        "Cwd": str(process.get("cwd", "")),
        "Capabilities": None
        if not isinstance(capabilities, Mapping)
        else {kata: list(_list(capabilities.get(oci))) for oci, kata in _CAPABILITY_KINDS},
        "Rlimits": [
            {
                "Type": str(r.get("type", "")),
                "Hard": int(r.get("hard", 0)),
                "Soft": int(r.get("soft", 0)),
            }
            for r in _list(process.get("rlimits"))
            if isinstance(r, Mapping)
        ],
        "NoNewPrivileges": bool(process.get("noNewPrivileges", False)),
        "ApparmorProfile": str(process.get("apparmorProfile", "")),
        "OOMScoreAdj": int(process.get("oomScoreAdj", 0)),
        "SelinuxLabel": "",  # no SELinux in the guest
    }


def _request_annotations(
    spec: Mapping[str, Any], container_id: str, *, bundle: str, sandbox: bool
) -> dict[str, str]:
    annotations = {
        str(key): str(value)
        for key, value in _annotations(spec).items()
        if not str(key).startswith(HOST_ANNOTATION_PREFIX)
    }
    annotations[KATA_BUNDLE_PATH] = bundle_path(bundle, container_id)
    annotations[KATA_CONTAINER_TYPE] = "pod_sandbox" if sandbox else "pod_container"
    if sandbox and NETNS_ANNOTATION not in annotations:
        # The sandbox's network namespace, which the policy pins (CRI's cni-<uuid> netns).
        for namespace in _list(_mapping(spec.get("linux")).get("namespaces")):
            network = isinstance(namespace, Mapping) and namespace.get("type") == "network"
            if network and namespace.get("path"):
                annotations[NETNS_ANNOTATION] = str(namespace["path"])
    return annotations


def _mounts(
    spec: Mapping[str, Any],
    container_id: str,
    device_number: Callable[[str], int] | None,
    random: Callable[[], str],
    is_tmpfs: Callable[[str], bool],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    mounts: list[dict[str, Any]] = []
    storages: list[dict[str, Any]] = []
    for item in _list(spec.get("mounts")):
        if not isinstance(item, Mapping):
            raise SpecError("a mount of the container's spec is not an object")
        destination = str(item.get("destination", ""))
        source = str(item.get("source", ""))
        type_ = str(item.get("type", ""))
        options = [str(o) for o in _list(item.get("options"))]
        bind = type_ == "bind" or "bind" in options or "rbind" in options
        if destination == "/dev/shm":  # noqa: S108 (a mount destination)
            shm = _mount(destination, SANDBOX_SHM, "bind", ["rbind"])
            # containerd 1.6 lists /dev/shm twice in a sandbox's spec (its default tmpfs, then
            # CRI's bind; 1.7 drops the first). Kata's handleShm rewrites every /dev/shm entry
            # in place to this same bind of the sandbox's shm and keeps both, which the rules
            # refuse (two input mounts, one policy mount). Both are the one guest mount, so a
            # byte-identical repeat is sent once; any other repeated destination stays.
            if shm not in mounts:
                mounts.append(shm)
        elif bind and _EMPTY_DIR in source and is_tmpfs(source):
            # medium: Memory (kubelet mounted a tmpfs): a tmpfs the guest makes, as Kata's
            # ephemeral storage, at a guest path named after the volume.
            point = f"{EPHEMERAL_DIR}/{posixpath.basename(source.rstrip('/'))}"
            storages.append(_ephemeral_storage(point))
            mounts.append(_mount(destination, point, "bind", options))
        elif bind and _EMPTY_DIR in source:
            number = device_number(source) if device_number is not None else 0
            storage = _empty_dir_storage(number)
            storages.append(storage)
            mounts.append(_mount(destination, storage["mount_point"], "bind", options))
        elif bind and not source.startswith(_SYSTEM_PREFIXES):
            name = posixpath.basename(destination.rstrip("/")) or "root"
            watchable = "watchable/" if any(w in source for w in _WATCHABLE) else ""
            shared = f"{SHARED_DIR}/{watchable}{container_id}-{random()}-{name}"
            mounts.append(_mount(destination, shared, "bind", options))
        else:
            mounts.append(_mount(destination, source, type_ or ("bind" if bind else ""), options))
    return mounts, storages


def _mount(destination: str, source: str, type_: str, options: Sequence[str]) -> dict[str, Any]:
    return {"destination": destination, "source": source, "type_": type_, "options": list(options)}


def on_tmpfs(path: str) -> bool:
    """Whether `path` is on a tmpfs, by the longest mount point above it in the mount table."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as table:
            lines = table.readlines()
    except OSError:
        return False
    target = os.path.realpath(path)
    best, kind = "", ""
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, line.split(" - ", 1)[1].split()[0]
    return kind == "tmpfs"


def _ephemeral_storage(point: str) -> dict[str, Any]:
    return {
        "driver": "ephemeral",
        "driver_options": [],
        "source": "tmpfs",
        "fstype": "tmpfs",
        "options": [],
        "mount_point": point,
        "fs_group": None,
        "shared": False,
    }


def _empty_dir_storage(number: int) -> dict[str, Any]:
    """The encrypted block volume Contrast's Kata attaches for an emptyDir (`block-encrypted`).

    Here the volume is kubelet's host directory: neither a block device nor encrypted.
    """
    source = f"{number // 32:02x}/{number % 32:02x}"
    point = f"{STORAGE_DIR}/{base64.urlsafe_b64encode(source.encode()).decode()}"
    return {
        "driver": "blk",
        "driver_options": ["encryption_key=ephemeral", "create_filesystem"],
        "source": source,
        "fstype": "ext4",
        "options": [],
        "mount_point": point,
        "fs_group": None,
        "shared": True,
    }


def _shm_storage() -> dict[str, Any]:
    return {
        "driver": "ephemeral",
        "driver_options": [],
        "source": "shm",
        "fstype": "tmpfs",
        "options": ["noexec", "nosuid", "nodev", "mode=1777", f"size={SHM_SIZE}"],
        "mount_point": SANDBOX_SHM,
        "fs_group": None,
        "shared": False,
    }


def _guest_pull_storage(image: str, root_path: str) -> dict[str, Any]:
    """The storage through which the guest pulls the image itself (not in any policy)."""
    return {
        "driver": "image_guest_pull",
        "driver_options": [],
        "source": image,
        "fstype": "overlay",
        "options": [],
        "mount_point": root_path,
        "fs_group": None,
        "shared": False,
    }


def _namespaces(value: Any) -> tuple[list[dict[str, str]], bool]:
    namespaces = []
    sandbox_pidns = False
    for item in _list(value):
        if not isinstance(item, Mapping):
            raise SpecError("a namespace of the container's spec is not an object")
        kind = str(item.get("type", ""))
        if kind in ("network", "cgroup"):
            continue
        if kind == "pid":
            # Joining an existing PID namespace is joining the sandbox's (shareProcessNamespace).
            sandbox_pidns = bool(item.get("path"))
            continue
        namespaces.append({"Type": kind, "Path": ""})
    return namespaces, sandbox_pidns


def _resources(resources: Mapping[str, Any]) -> dict[str, Any]:
    """Only memory and CPU limits reach the guest, CPU without its cpuset."""
    cpu = _capitalised(resources.get("cpu"))
    if cpu is not None:
        cpu.update(Cpus="", Mems="")
    return {
        "Devices": [],
        "Memory": _capitalised(resources.get("memory")),
        "CPU": cpu,
        "Pids": None,
        "BlockIO": None,
        "HugepageLimits": [],
        "Network": None,
    }


def _capitalised(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, Mapping):
        return None
    renamed = {"kernelTCP": "KernelTCP", "disableOOMKiller": "DisableOOMKiller"}
    return {renamed.get(str(k), str(k)[:1].upper() + str(k)[1:]): v for k, v in value.items()}


def _id_mapping(value: Any) -> dict[str, int]:
    mapping = _mapping(value)
    return {
        "ContainerID": int(mapping.get("containerID", 0)),
        "HostID": int(mapping.get("hostID", 0)),
        "Size": int(mapping.get("size", 0)),
    }


def _device(value: Any) -> dict[str, Any]:
    device = _mapping(value)
    return {
        "Path": str(device.get("path", "")),
        "Type": str(device.get("type", "")),
        "Major": int(device.get("major", 0)),
        "Minor": int(device.get("minor", 0)),
        "FileMode": int(device.get("fileMode", 0)),
        "UID": int(device.get("uid", 0)),
        "GID": int(device.get("gid", 0)),
    }


def _annotations(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(spec.get("annotations"))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
