"""Injection of the Initializer and the service-mesh sidecar into confidential pods.

Shapes follow the original (research/contrast.md §6.2 step 4, §6.4, §7, §9): the Initializer is
the first init container and fetches the pod's mesh certificate into the `contrast-secrets`
memory volume, which every container mounts at `/contrast`; the sidecar is a native sidecar
(an init container with `restartPolicy: Always`) right after it, configured by the pod's
`servicemesh-*` annotations through the environment `contrast servicemesh run` reads.

Every function is idempotent: run on its own output it changes nothing, so `generate` can be
re-run on the files it wrote. Both injected containers are derived from the pod alone, so a
re-run after the annotations (or the release) changed brings them up to date.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from contrast.initializer.files import TLS_DIR
from contrast.kuberesource import securepv
from contrast.kuberesource.release import INITIALIZER_IMAGE, SERVICE_MESH_IMAGE
from contrast.kuberesource.workloads import CONTRAST_ANNOTATION_PREFIX, ResourceError, Workload
from contrast.servicemesh import envoy
from contrast.servicemesh.annotations import ServiceMeshError, parse_egress, parse_ingress
from contrast.servicemesh.sidecar import ADMIN_PORT_ENV, EGRESS_ENV, INGRESS_ENV

SKIP_INITIALIZER_ANNOTATION = f"{CONTRAST_ANNOTATION_PREFIX}skip-initializer"
INGRESS_ANNOTATION = f"{CONTRAST_ANNOTATION_PREFIX}servicemesh-ingress"
EGRESS_ANNOTATION = f"{CONTRAST_ANNOTATION_PREFIX}servicemesh-egress"
ADMIN_PORT_ANNOTATION = f"{CONTRAST_ANNOTATION_PREFIX}servicemesh-admin-interface-port"
SERVICE_MESH_ANNOTATIONS = (INGRESS_ANNOTATION, EGRESS_ANNOTATION, ADMIN_PORT_ANNOTATION)

INITIALIZER_NAME = "contrast-initializer"
SERVICE_MESH_NAME = "contrast-service-mesh"
SECRETS_VOLUME = "contrast-secrets"
SECRETS_MOUNT_PATH = "/contrast"
COORDINATOR_HOST_ENV = "COORDINATOR_HOST"
# Where the Initializer's evidence comes from (cli/components.py): on the emulated platforms the
# emulated runtime's per-pod socket; elsewhere the default, the hardware's device.
TEE_ENV = "CONTRAST_TEE"
EMULATED_TEE = "emulated"
SERVICE_MESH_DISABLED_ENV = "CONTRAST_SERVICE_MESH_DISABLED"
COORDINATOR_READY_SERVICE = "coordinator-ready"
ADMIN_PORT_NAME = "contrast-admin"
CRYPTSETUP = securepv.CRYPTSETUP_DEVICE_ENV

INITIALIZER_COMMAND = ("contrast", "initializer")
SERVICE_MESH_COMMAND = ("contrast", "servicemesh", "run")
# Injected containers carry explicit memory limits (request = limit), so the VM is sized for them.
INITIALIZER_MEMORY = "50Mi"
SERVICE_MESH_MEMORY = "100Mi"


class InjectionError(ResourceError):
    """A pod that cannot take the Initializer or the sidecar as it is written."""


def coordinator_namespace(workloads: Iterable[Workload]) -> str:
    """The namespace of the Coordinator among the inputs (`default` without one)."""
    namespaces = {w.namespace or "default" for w in workloads if w.is_coordinator}
    if len(namespaces) > 1:
        raise InjectionError(
            f"Coordinators in several namespaces: {', '.join(sorted(namespaces))}",
            hint="deploy one Coordinator per set of resources",
        )
    return namespaces.pop() if namespaces else "default"


def coordinator_host(namespace: str) -> str:
    return f"{COORDINATOR_READY_SERVICE}.{namespace}"


# ---------------------------------------------------------------------------------------------
# The containers


def _memory(amount: str) -> dict[str, Any]:
    return {"limits": {"memory": amount}, "requests": {"memory": amount}}


def _secrets_mount() -> dict[str, Any]:
    return {"name": SECRETS_VOLUME, "mountPath": SECRETS_MOUNT_PATH}


def initializer_container(
    namespace: str,
    *,
    service_mesh: bool,
    secure_pv: securepv.SecurePv | None = None,
    emulated: bool = False,
) -> dict[str, Any]:
    """The Initializer as `contrast initializer` expects to be run (cli/components.py); with
    `secure_pv`, also as the keeper of the encrypted volume (securepv.py); on an emulated
    platform with the emulated runtime's TEE socket (`CONTRAST_TEE=emulated`)."""
    env = [{"name": COORDINATOR_HOST_ENV, "value": coordinator_host(namespace)}]
    if not service_mesh:
        env.append({"name": SERVICE_MESH_DISABLED_ENV, "value": "true"})
    if emulated:
        env.append({"name": TEE_ENV, "value": EMULATED_TEE})
    container: dict[str, Any] = {
        "name": INITIALIZER_NAME,
        "image": INITIALIZER_IMAGE,
        "command": list(INITIALIZER_COMMAND),
        "env": env,
        "resources": _memory(INITIALIZER_MEMORY),
        "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
        "volumeMounts": [_secrets_mount()],
    }
    if secure_pv is not None:
        securepv.configure_initializer(container, secure_pv)
    return container


@dataclass(frozen=True)
class ServiceMeshConfig:
    """The workload's `servicemesh-*` annotations, validated; None fields were not annotated."""

    ingress: str | None
    egress: str | None
    admin_port: int | None

    @classmethod
    def from_workload(cls, workload: Workload) -> ServiceMeshConfig | None:
        """The config, or None when none of the three annotations is present."""
        values = {name: workload.annotation(name) for name in SERVICE_MESH_ANNOTATIONS}
        if all(value is None for value in values.values()):
            return None
        where = workload.describe()
        ingress, egress = values[INGRESS_ANNOTATION], values[EGRESS_ANNOTATION]
        admin = values[ADMIN_PORT_ANNOTATION]
        if egress is not None and not egress.strip():
            raise InjectionError(
                f"{where}: annotation {EGRESS_ANNOTATION} is empty",
                hint="list entries as name#listenIP:port#remoteHost:port, or remove it",
            )
        try:
            parse_ingress(ingress or "")
            parse_egress(egress or "")
        except ServiceMeshError as error:
            raise InjectionError(f"{where}: {error}", hint=error.hint) from error
        admin_port = None
        if admin is not None:
            admin = admin.strip()
            if not admin.isdigit() or not 0 < int(admin) < 65536:
                raise InjectionError(
                    f"{where}: annotation {ADMIN_PORT_ANNOTATION}={admin!r} is not a port",
                    hint="give a port number between 1 and 65535",
                )
            admin_port = int(admin)
        return cls(ingress, egress, admin_port)


def service_mesh_container(config: ServiceMeshConfig) -> dict[str, Any]:
    """The native sidecar running `contrast servicemesh run` (cli/servicemesh.py)."""
    env = []
    if config.ingress is not None:
        env.append({"name": INGRESS_ENV, "value": config.ingress})
    if config.egress is not None:
        env.append({"name": EGRESS_ENV, "value": config.egress})
    if config.admin_port is not None:
        env.append({"name": ADMIN_PORT_ENV, "value": str(config.admin_port)})
    container: dict[str, Any] = {
        "name": SERVICE_MESH_NAME,
        "image": SERVICE_MESH_IMAGE,
        "command": [*SERVICE_MESH_COMMAND, "--tls-dir", f"{SECRETS_MOUNT_PATH}/{TLS_DIR}"],
        "restartPolicy": "Always",
        "env": env,
        "resources": _memory(SERVICE_MESH_MEMORY),
        "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
        # Envoy listens on the mutual-TLS port once the redirect is installed (servicemesh/).
        "startupProbe": {
            "tcpSocket": {"port": envoy.MTLS_PORT},
            "periodSeconds": 1,
            "failureThreshold": 60,
        },
        "volumeMounts": [_secrets_mount()],
    }
    if config.admin_port is not None:
        container["ports"] = [{"name": ADMIN_PORT_NAME, "containerPort": config.admin_port}]
    return container


# ---------------------------------------------------------------------------------------------
# Editing a pod


def _list(spec: MutableMapping[str, Any], key: str, where: str) -> list[Any]:
    value = spec.get(key)
    if value is None:
        value = spec[key] = []
    if not isinstance(value, list):
        raise InjectionError(f"{where}: spec.{key} is not a list")
    return value


def _index(containers: list[Any], name: str) -> int | None:
    for index, container in enumerate(containers):
        if isinstance(container, Mapping) and container.get("name") == name:
            return index
    return None


def _put(containers: list[Any], position: int, wanted: dict[str, Any]) -> bool:
    """Insert `wanted` at `position`, or bring an existing container of its name up to date."""
    index = _index(containers, wanted["name"])
    if index is None:
        containers.insert(position, wanted)
        return True
    existing = containers[index]
    if dict(existing) == wanted:
        return False
    # Update in place so the round-trip node (and comments around it) stays.
    for key in list(existing):
        if key not in wanted:
            del existing[key]
    for key, value in wanted.items():
        if existing.get(key) != value:
            existing[key] = value
    return True


def _set_env(container: MutableMapping[str, Any], name: str, value: str | None) -> bool:
    env = container.get("env")
    if env is None:
        if value is None:
            return False
        env = container["env"] = []
    index = _index(env, name)
    if value is None:
        if index is None:
            return False
        del env[index]
        return True
    if index is None:
        env.append({"name": name, "value": value})
        return True
    if env[index].get("value") == value and "valueFrom" not in env[index]:
        return False
    env[index] = {"name": name, "value": value}
    return True


def ensure_secrets_volume(workload: Workload) -> bool:
    """The `contrast-secrets` memory volume, mounted at `/contrast` in every container."""
    where = workload.describe()
    spec = workload.pod_spec
    changed = False
    volumes = _list(spec, "volumes", where)
    index = _index(volumes, SECRETS_VOLUME)
    if index is None:
        volumes.append({"name": SECRETS_VOLUME, "emptyDir": {"medium": "Memory"}})
        changed = True
    elif "emptyDir" not in volumes[index]:
        raise InjectionError(
            f"{where}: volume {SECRETS_VOLUME!r} exists and is not an emptyDir",
            hint=f"rename that volume; Contrast keeps the pod's certificates in {SECRETS_VOLUME!r}",
        )
    for container in workload.all_containers():
        mounts = container.get("volumeMounts")
        if mounts is None:
            mounts = container["volumeMounts"] = []
        if any(m.get("name") == SECRETS_VOLUME for m in mounts):
            continue
        clash = [m.get("name") for m in mounts if m.get("mountPath") == SECRETS_MOUNT_PATH]
        if clash:
            raise InjectionError(
                f"{where}: container {container.get('name')!r} mounts {clash[0]!r} at"
                f" {SECRETS_MOUNT_PATH}, where Contrast puts the pod's certificates",
                hint=f"mount it elsewhere; {SECRETS_MOUNT_PATH} is reserved",
            )
        mounts.append(_secrets_mount())
        changed = True
    return changed


def inject_initializer(
    workload: Workload, namespace: str, *, service_mesh: bool, emulated: bool = False
) -> bool:
    """Add the Initializer as the first init container, plus its volume; whether it changed.

    `service_mesh` says whether the pod gets the sidecar; without it the Initializer itself
    lifts the VM's default-deny rule. An Initializer that is already there keeps its place and
    its fields (a user may have adapted it), but those two settings follow the pod.
    """
    where = workload.describe()
    pv = securepv.prepare(workload, INITIALIZER_NAME)
    init_containers = _list(workload.pod_spec, "initContainers", where)
    wanted = initializer_container(
        namespace, service_mesh=service_mesh, secure_pv=pv, emulated=emulated
    )
    index = _index(init_containers, INITIALIZER_NAME)
    if index is None:
        init_containers.insert(0, wanted)
        changed = True
    elif pv is not None or _index(init_containers[index].get("env") or [], CRYPTSETUP) is not None:
        # The encrypted volume's Initializer is wholly derived from the annotation: brought up
        # to date when it changed, back to the plain one when it was removed.
        changed = _put(init_containers, index, wanted)
    else:
        existing = init_containers[index]
        changed = _set_env(existing, COORDINATOR_HOST_ENV, coordinator_host(namespace))
        disabled = None if service_mesh else "true"
        changed |= _set_env(existing, SERVICE_MESH_DISABLED_ENV, disabled)
        changed |= _set_env(existing, TEE_ENV, EMULATED_TEE if emulated else None)
    return ensure_secrets_volume(workload) or changed


def inject_service_mesh(workload: Workload) -> bool:
    """Add or update the sidecar right after the Initializer; remove it without annotations."""
    config = ServiceMeshConfig.from_workload(workload)
    spec = workload.pod_spec
    if config is None:
        existing = spec.get("initContainers")
        if not isinstance(existing, list):
            return False
        index = _index(existing, SERVICE_MESH_NAME)
        if index is None:
            return False
        del existing[index]
        return True
    init_containers = _list(spec, "initContainers", workload.describe())
    wanted = service_mesh_container(config)
    if not _has_volume(spec):
        wanted.pop("volumeMounts")  # no Initializer, no certificates (--skip-initializer)
    initializer = _index(init_containers, INITIALIZER_NAME)
    position = 0 if initializer is None else initializer + 1
    changed = _put(init_containers, position, wanted)
    if _has_volume(spec):
        changed |= ensure_secrets_volume(workload)
    return changed


def _has_volume(spec: Mapping[str, Any]) -> bool:
    volumes = spec.get("volumes")
    return isinstance(volumes, list) and _index(volumes, SECRETS_VOLUME) is not None


def wants_initializer(workload: Workload, *, skip_initializer: bool = False) -> bool:
    """Not for the Coordinator, `--skip-initializer` or `skip-initializer: "true"`."""
    skip = (workload.annotation(SKIP_INITIALIZER_ANNOTATION) or "").strip().lower()
    return not (skip_initializer or workload.is_coordinator or skip == "true")


def wants_service_mesh(workload: Workload, *, skip_service_mesh: bool = False) -> bool:
    """Whether the pod gets the sidecar (validating its annotations)."""
    if skip_service_mesh or workload.is_coordinator:
        return False
    return ServiceMeshConfig.from_workload(workload) is not None


def inject(
    workload: Workload,
    *,
    coordinator_namespace: str,
    skip_initializer: bool = False,
    skip_service_mesh: bool = False,
    emulated: bool = False,
) -> bool:
    """Everything a confidential pod gets; whether the pod changed.

    `coordinator_namespace` is the Coordinator's (`coordinator_namespace()` of all inputs). The
    Coordinator itself gets neither container: it issues the certificates.
    """
    changed = False
    mesh = wants_service_mesh(workload, skip_service_mesh=skip_service_mesh)
    if wants_initializer(workload, skip_initializer=skip_initializer):
        changed |= inject_initializer(
            workload, coordinator_namespace, service_mesh=mesh, emulated=emulated
        )
    elif securepv.SecurePv.from_workload(workload) is not None:
        raise InjectionError(
            f"{workload.describe()}: annotation {securepv.SECURE_PV_ANNOTATION} needs the"
            " Initializer, which sets up the encrypted volume",
            hint="remove skip-initializer (or --skip-initializer), or the secure-pv annotation",
        )
    if not skip_service_mesh and not workload.is_coordinator:
        changed |= inject_service_mesh(workload)
    return changed
