"""One entry of `policy_data.containers`: what the runtime will send when it creates a container.

Field and key order follow genpolicy's structs (research/kata-agent-policy-inputs.md §4.3), so the
JSON has the same shape as genpolicy's; maps (Annotations, Sysctl, runtime_anno_patterns) are
sorted and AdditionalGids is a sorted set, as Rust's BTreeMap/BTreeSet serialise them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from contrast.images.model import ImageFacts
from contrast.policy.env import EnvContext, container_env, expand
from contrast.policy.generation_errors import PolicyGenerationError
from contrast.policy.mounts import MountBuilder
from contrast.policy.settings import Settings
from contrast.policy.users import (
    Accounts,
    SecurityContexts,
    container_identity,
    guest_pull_demands,
)

# Annotations that carry a policy and never reach OCI.Annotations themselves.
POLICY_ANNOTATIONS = (
    "io.katacontainers.config.hypervisor.cc_init_data",
    "io.katacontainers.config.agent.policy",
)
TERMINATION_PATTERNS = {
    "^io\\.kubernetes\\.container\\.terminationMessagePath$": "^/.*$",
    "^io\\.kubernetes\\.container\\.terminationMessagePolicy$": "^(File|FallbackToLogsOnError)$",
}
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HOOKS = ("postStart", "preStop")


@dataclass(frozen=True)
class PodFacts:
    """What every container of one pod shares."""

    spec: Mapping[str, Any]
    annotations: Mapping[str, str]
    sandbox_name: str
    namespace: str
    env_context: EnvContext
    where: str


def _caps(settings: Settings, context: Mapping[str, Any], privileged: bool) -> dict[str, list[str]]:
    """containerd's capability sets after the securityContext's add/drop (WithCapabilities)."""
    default = list(settings.get("common", "default_caps", default=[]))
    everything = list(settings.get("common", "privileged_caps", default=[]))
    current = list(everything if privileged else default)
    capabilities = context.get("capabilities") or {}
    add = [str(c).upper() for c in capabilities.get("add") or []]
    drop = [str(c).upper() for c in capabilities.get("drop") or []]
    if not privileged:
        if "ALL" in add:
            current = list(everything)
        if "ALL" in drop:
            current = []
        for cap in add:
            name = cap if cap.startswith("CAP_") else f"CAP_{cap}"
            if cap != "ALL" and name not in current:
                current.append(name)
        dropped = {cap if cap.startswith("CAP_") else f"CAP_{cap}" for cap in drop}
        current = [cap for cap in current if cap not in dropped]

    def placeholder(caps: list[str]) -> list[str]:
        if caps == default:
            return ["$(default_caps)"]
        if caps == everything:
            return ["$(privileged_caps)"]
        return caps

    return {
        "Ambient": [],
        "Bounding": placeholder(current),
        "Effective": placeholder(current),
        "Inheritable": [],
        "Permitted": placeholder(current),
    }


def _args(
    container: Mapping[str, Any], image: ImageFacts, variables: Mapping[str, str]
) -> list[str]:
    """Kubernetes' command/args over the image's Entrypoint/Cmd, then `$(VAR)` expansion."""
    command = container.get("command")
    args = container.get("args")
    if command is not None:
        result = [str(a) for a in command] + [str(a) for a in args or []]
    else:
        result = list(image.config.entrypoint or [])
        result += [str(a) for a in args] if args is not None else list(image.config.cmd or [])
    return [expand(arg, variables) for arg in result]


def _exec_commands(container: Mapping[str, Any]) -> list[list[str]]:
    commands = []
    for probe in PROBES:
        command = ((container.get(probe) or {}).get("exec") or {}).get("command")
        if command:
            commands.append([str(a) for a in command])
    for hook in HOOKS:
        command = (((container.get("lifecycle") or {}).get(hook) or {}).get("exec") or {}).get(
            "command"
        )
        if command:
            commands.append([str(a) for a in command])
    return commands


def _gpu_count(settings: Settings, container: Mapping[str, Any]) -> int:
    keys = settings.get("devices", "vfio", "nvidia", "pgpu_resource_keys", default=[]) or []
    limits = (container.get("resources") or {}).get("limits") or {}
    total = 0
    for key in keys:
        if key in limits:
            try:
                total += int(str(limits[key]))
            except ValueError:
                raise PolicyGenerationError(
                    f"resources.limits[{key}] is not a whole number"
                ) from None
    return total


def container_policy(
    settings: Settings,
    pod: PodFacts,
    container: Mapping[str, Any],
    image: ImageFacts,
    *,
    pause: bool,
) -> dict[str, Any]:
    """One container's policy entry: its OCI process, mounts, annotations and Linux settings.

    Each section is its own function below, in the order they are built (the order in which
    their errors are raised).
    """
    where = f"{pod.where}: container {container.get('name') or '(pause)'}"
    template = settings.section("pause_container" if pause else "other_container")
    context = container.get("securityContext") or {}
    privileged = bool(context.get("privileged")) and not pause
    read_only_root = bool(context.get("readOnlyRootFilesystem"))

    process = _process(
        settings, pod, container, image, template, where=where, privileged=privileged, pause=pause
    )
    builder = _mounts(
        settings,
        pod,
        container,
        image,
        where=where,
        privileged=privileged,
        read_only_root=read_only_root,
        pause=pause,
    )
    annotations = _annotations(pod, container, image, template, pause=pause)
    linux, devices = _linux(pod, container, template, privileged=privileged, pause=pause)
    patterns = {} if pause else _device_patterns(settings, container, devices)

    oci: dict[str, Any] = {
        "Version": str(settings.get("kata_config", "oci_version", default="1.1.0")),
        "Process": process,
        "Root": {
            "Path": str((template.get("Root") or {}).get("Path", "$(root_path)")),
            "Readonly": bool((template.get("Root") or {}).get("Readonly", False)) or read_only_root,
        },
        "Mounts": builder.mounts,
        "Annotations": dict(sorted(annotations.items())),
        "Linux": linux,
    }
    for optional in ("Mounts", "Annotations"):
        if not oci[optional]:
            del oci[optional]
    return {
        "OCI": oci,
        "storages": builder.storages,
        "devices": devices,
        "sandbox_pidns": bool(pod.spec.get("shareProcessNamespace")) and not pause,
        "exec_commands": [] if pause else _exec_commands(container),
        "runtime_anno_patterns": dict(sorted(patterns.items())),
    }


def _process(
    settings: Settings,
    pod: PodFacts,
    container: Mapping[str, Any],
    image: ImageFacts,
    template: Mapping[str, Any],
    *,
    where: str,
    privileged: bool,
    pause: bool,
) -> dict[str, Any]:
    """The OCI process: arguments, environment, user and groups, capabilities."""
    context = container.get("securityContext") or {}
    env, variables = container_env(
        container, image.config.env, replace(pod.env_context, where=where), pause=pause
    )
    args = _args(container, image, variables)
    process_template = template.get("Process") or {}
    for arg in process_template.get("Args") or []:
        if arg not in args:
            args.append(arg)
    for variable in process_template.get("Env") or []:
        if variable not in env:
            env.append(variable)
    contexts = SecurityContexts.from_yaml(pod.spec, container)
    identity = container_identity(
        image.config.user, Accounts.parse(image.etc_passwd, image.etc_group), contexts, pause=pause
    )
    if settings.guest_pull and not pause and (lines := guest_pull_demands(identity, contexts)):
        suggestion = "\n".join(f"  {line}" for line in lines)
        raise PolicyGenerationError(
            f"ERROR: guest_pull is enabled and {where} (image {image.reference}) takes its user "
            "or groups from the image, which the guest may resolve differently. Set explicit "
            f"Kubernetes securityContext values:\n{suggestion}",
            hint="add these fields to the pod's or the container's securityContext",
        )
    if pause:
        no_new_privileges = bool(process_template.get("NoNewPrivileges", True))
    else:
        no_new_privileges = context.get("allowPrivilegeEscalation") is False and not privileged
    tty = container.get("tty")
    process: dict[str, Any] = {
        "Terminal": bool(tty) if tty is not None else image.config.tty,
        "User": {
            "UID": identity.uid,
            "GID": identity.gid,
            "AdditionalGids": sorted(identity.additional_gids),
            "Username": "",
        },
        "Args": args,
        "Env": env,
        "Cwd": str(container.get("workingDir") or image.config.working_dir or "/"),
        "Capabilities": _caps(settings, context, privileged),
        "NoNewPrivileges": no_new_privileges,
    }
    for optional in ("Args", "Env", "Cwd"):
        if not process[optional]:
            del process[optional]
    return process


def _mounts(
    settings: Settings,
    pod: PodFacts,
    container: Mapping[str, Any],
    image: ImageFacts,
    *,
    where: str,
    privileged: bool,
    read_only_root: bool,
    pause: bool,
) -> MountBuilder:
    """The mounts and storages: the defaults, the pod's volumes, the image's volumes."""
    builder = MountBuilder(settings, where)
    builder.defaults(container, pause=pause, privileged=privileged, read_only_root=read_only_root)
    volumes = {str(v.get("name")): v for v in pod.spec.get("volumes") or []}
    pod_context = pod.spec.get("securityContext") or {}
    if not pause:
        for volume_mount in container.get("volumeMounts") or []:
            name = str(volume_mount.get("name", ""))
            if name not in volumes:
                raise PolicyGenerationError(f"{where}: volumeMount {name!r} names no pod volume")
            builder.volume(
                volumes[name],
                volume_mount,
                pod_context.get("fsGroup"),
                pod_context.get("fsGroupChangePolicy"),
            )
        for destination in image.config.volumes:
            builder.image_volume(destination)
    return builder


def _annotations(
    pod: PodFacts,
    container: Mapping[str, Any],
    image: ImageFacts,
    template: Mapping[str, Any],
    *,
    pause: bool,
) -> dict[str, str]:
    """The OCI annotations: the pod's (less the policy's own), the template's, the CRI's."""
    annotations = {k: str(v) for k, v in pod.annotations.items() if k not in POLICY_ANNOTATIONS}
    for key, value in (template.get("Annotations") or {}).items():
        annotations.setdefault(key, str(value))
    annotations.setdefault("io.kubernetes.cri.sandbox-name", pod.sandbox_name)
    if not pause:
        image_name = image.reference if ":" in image.reference else f"{image.reference}:latest"
        annotations.setdefault("io.kubernetes.cri.image-name", image_name)
    annotations["io.kubernetes.cri.sandbox-namespace"] = pod.namespace
    if container.get("name"):
        annotations.setdefault("io.kubernetes.cri.container-name", str(container["name"]))
    if pause:
        netns = "^/var/run/netns/cni" + ("test" if pod.spec.get("hostNetwork") else "")
        netns += "-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
        annotations.setdefault("nerdctl/network-namespace", netns)
    return annotations


def _linux(
    pod: PodFacts,
    container: Mapping[str, Any],
    template: Mapping[str, Any],
    *,
    privileged: bool,
    pause: bool,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The OCI Linux section (namespaces, masked and read-only paths, devices, sysctls), and
    the policy's device list with the container's volume devices."""
    linux_template = template.get("Linux") or {}
    namespaces = [{"Type": "ipc", "Path": ""}]
    if not pause or not pod.spec.get("hostNetwork"):
        namespaces.append({"Type": "uts", "Path": ""})
    namespaces.append({"Type": "mount", "Path": ""})
    masked: list[str] = []
    readonly: list[str] = []
    if not privileged:
        masked = list(linux_template.get("MaskedPaths") or []) or [
            "/proc/acpi",
            "/proc/kcore",
            "/proc/keys",
            "/proc/latency_stats",
            "/proc/timer_list",
            "/proc/timer_stats",
            "/proc/sched_debug",
            "/proc/scsi",
            "/sys/firmware",
        ]
        readonly = list(linux_template.get("ReadonlyPaths") or []) or [
            "/proc/asound",
            "/proc/bus",
            "/proc/fs",
            "/proc/irq",
            "/proc/sys",
            "/proc/sysrq-trigger",
        ]
    devices: list[dict[str, Any]] = []
    linux_devices: list[dict[str, Any]] = []
    if not pause:
        for volume_device in container.get("volumeDevices") or []:
            path = str(volume_device.get("devicePath", ""))
            devices.append(_device(path))
            linux_devices.append({"Type": "", "Path": path})
    linux_devices += [dict(d) for d in linux_template.get("Devices") or []]
    sysctl = {str(k): str(v) for k, v in (linux_template.get("Sysctl") or {}).items()}
    pod_context = pod.spec.get("securityContext") or {}
    for entry in pod_context.get("sysctls") or []:
        sysctl[str(entry.get("name"))] = str(entry.get("value"))
    linux: dict[str, Any] = {
        "Namespaces": namespaces,
        "MaskedPaths": masked,
        "ReadonlyPaths": readonly,
        "Devices": linux_devices,
        "Sysctl": dict(sorted(sysctl.items())),
    }
    if not sysctl:
        del linux["Sysctl"]
    return linux, devices


def _device_patterns(
    settings: Settings, container: Mapping[str, Any], devices: list[dict[str, Any]]
) -> dict[str, str]:
    """The runtime annotation patterns of a (non-pause) container; its GPUs join `devices`."""
    patterns: dict[str, str] = dict(TERMINATION_PATTERNS)
    gpus = _gpu_count(settings, container)
    if gpus:
        vfio = settings.get("devices", "vfio", default={}) or {}
        nvidia = vfio.get("nvidia") or {}
        for _ in range(gpus):
            devices.append(
                _device(str(vfio.get("device_path", "")), str(nvidia.get("gpu_gk_device_type", "")))
            )
        patterns[str(vfio.get("anno_key_regex", ""))] = str(nvidia.get("gpu_anno_value_regex", ""))
    return patterns


def _device(container_path: str, type_: str = "") -> dict[str, Any]:
    return {
        "id": "",
        "type_": type_,
        "vm_path": "",
        "container_path": container_path,
        "options": [],
    }
