"""Release resources: the runtime (RuntimeClass + node installer) and the Coordinator.

Shapes follow the original's `internal/kuberesource/parts.go` (research/contrast.md §2.2): the
RuntimeClass carries the VM's memory as `overhead.podFixed` so the scheduler accounts for it; the
node installer is a privileged init container with the host root mounted, followed by `pause`;
the Coordinator is a StatefulSet reachable through `coordinator` (all ports, also when not ready,
so the first `set` gets through) and `coordinator-ready` (ready pods only, for Initializers).
Its history is in ConfigMaps (several replicas, each with the least-privilege Role the store
needs, finding ready peers through the headless `coordinator-peers`), or on a persistent volume
(one replica).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contrast.history.backends import HistoryBackend
from contrast.history.configmaps import VERBS
from contrast.kuberesource.releaseimages import reference
from contrast.kuberesource.workloads import ResourceError
from contrast.platforms import Platform

# By digest in a release, by tag in a source tree (`releaseimages`).
COORDINATOR_IMAGE = reference("coordinator")
NODE_INSTALLER_IMAGE = reference("node-installer")
INITIALIZER_IMAGE = reference("initializer")
SERVICE_MESH_IMAGE = reference("service-mesh-proxy")
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
USER_API_PORT = 1313
MESH_API_PORT = 7777
HTTP_PORT = 9102
TRANSIT_API_PORT = 8200  # the transit engine (Vault auto-unseal), named transitapi as the original
STATE_DIR = "/mnt/state"
ROLE_ANNOTATION = "contrast.edgeless.systems/pod-role"
COORDINATOR_LABELS = {"app.kubernetes.io/name": "coordinator"}
# The headless Service whose DNS name lists the ready replicas, for peer recovery.
PEER_SERVICE = "coordinator-peers"
INSTALLER_COMMAND = ("contrast", "node-installer", "--host-root", "/host")
TARGET_CONFIG_MAP = "contrast-node-installer-target-config"
TARGET_CONFIG_DIR = "/config/target-config"
# The node's system bus (/run/dbus/system_bus_socket) as the installer sees it, for busctl.
HOST_SYSTEM_BUS = "unix:path=/host/run/dbus/system_bus_socket"
# Where a built runtime's payload (`contrast runtime build`'s runtimes/<handler>/) is on a node,
# unless it comes in an image; the installer reads it through its host-root mount.
PAYLOAD_HOST_DIRECTORY = "/var/lib/contrast/payloads"
PAYLOAD_IMAGE_DIRECTORY = "/usr/share/contrast/runtimes"


class ReleaseError(ResourceError):
    """Options that make no working set of release resources."""


@dataclass(frozen=True)
class Payload:
    """Where the node installer finds a built runtime's payload.

    Without `image`, on each node at `/var/lib/contrast/payloads/<handler>/` (copied there by the
    operator); with `image`, in that image at `/usr/share/contrast/runtimes/<handler>/`: an image
    that also holds `contrast` (the node-installer image with the payload as one more layer),
    which then runs the installer.
    """

    handler: str
    image: str | None = None

    @property
    def path(self) -> str:
        if self.image is not None:
            return f"{PAYLOAD_IMAGE_DIRECTORY}/{self.handler}"
        return f"/host{PAYLOAD_HOST_DIRECTORY}/{self.handler}"


def runtime_class(
    platform: Platform,
    *,
    node_selector: Mapping[str, str] | None = None,
    handler: str | None = None,
) -> dict[str, Any]:
    name = handler or platform.runtime_class_name
    resource: dict[str, Any] = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {
            "name": name,
            "labels": {"addonmanager.kubernetes.io/mode": "Reconcile"},
        },
        "handler": name,
        "overhead": {"podFixed": {"memory": f"{platform.pod_overhead_mib}Mi"}},
    }
    if node_selector:
        resource["scheduling"] = {"nodeSelector": dict(node_selector)}
    return resource


def node_installer(
    platform: Platform,
    *,
    namespace: str = "kube-system",
    node_selector: Mapping[str, str] | None = None,
    image: str = NODE_INSTALLER_IMAGE,
    payload: Payload | None = None,
) -> dict[str, Any]:
    handler = platform.runtime_class_name if payload is None else payload.handler
    name = f"{handler}-nodeinstaller"
    labels = {"app.kubernetes.io/name": name}
    # The shipped runtime's artefacts are in the image; a built one's in its payload.
    source = ["--platform", platform.name] if payload is None else ["--payload", payload.path]
    if payload is not None and payload.image is not None:
        image = payload.image
    pod_spec: dict[str, Any] = {
        "hostPID": True,
        "initContainers": [
            {
                "name": "installer",
                "image": image,
                "command": [
                    *INSTALLER_COMMAND,
                    *source,
                    "--target-config",
                    TARGET_CONFIG_DIR,
                ],
                "securityContext": {"privileged": True},
                # systemd's bus through the host root, not a Socket hostPath of its own: a
                # node without systemd has no such socket, and the pod would never start there
                # (it restarts containerd through the target config's containerd-pid-file).
                "env": [{"name": "DBUS_SYSTEM_BUS_ADDRESS", "value": HOST_SYSTEM_BUS}],
                "volumeMounts": [
                    {"name": "host-root", "mountPath": "/host"},
                    {"name": "target-config", "mountPath": TARGET_CONFIG_DIR, "readOnly": True},
                ],
            }
        ],
        "containers": [
            {
                "name": "pause",
                "image": PAUSE_IMAGE,
                "resources": {"limits": {"memory": "16Mi"}, "requests": {"memory": "16Mi"}},
            }
        ],
        "volumes": [
            {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}},
            # The node's containerd and systemd layout (research/contrast.md §8). Optional: an
            # absent ConfigMap mounts as an empty directory, which means all defaults.
            {
                "name": "target-config",
                "configMap": {"name": TARGET_CONFIG_MAP, "optional": True},
            },
        ],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        ROLE_ANNOTATION: "contrast-node-installer",
                        "contrast.edgeless.systems/platform": platform.display_name,
                    },
                },
                "spec": pod_spec,
            },
        },
    }


def runtime_resources(
    platform: Platform,
    *,
    node_selector: Mapping[str, str] | None = None,
    payload: Payload | None = None,
) -> list[dict[str, Any]]:
    """The RuntimeClass and node-installer DaemonSet: of this release's runtime, or a built one."""
    handler = None if payload is None else payload.handler
    return [
        runtime_class(platform, node_selector=node_selector, handler=handler),
        node_installer(platform, node_selector=node_selector, payload=payload),
    ]


def _ports() -> list[dict[str, Any]]:
    return [
        {"name": "userapi", "containerPort": USER_API_PORT},
        {"name": "meshapi", "containerPort": MESH_API_PORT},
        {"name": "http", "containerPort": HTTP_PORT},
        {"name": "transitapi", "containerPort": TRANSIT_API_PORT},
    ]


def _service(name: str, *, load_balancer: bool, publish_not_ready: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": dict(COORDINATOR_LABELS),
        "ports": [
            {"name": port["name"], "port": port["containerPort"], "targetPort": port["name"]}
            for port in _ports()
        ],
    }
    if load_balancer:
        spec["type"] = "LoadBalancer"
    if publish_not_ready:
        spec["publishNotReadyAddresses"] = True
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def _peer_service() -> dict[str, Any]:
    """Headless, ready pods only: its DNS name resolves to the replicas that can hand the seed."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": PEER_SERVICE},
        "spec": {
            "clusterIP": "None",
            "selector": dict(COORDINATOR_LABELS),
            "ports": [{"name": "meshapi", "port": MESH_API_PORT, "targetPort": "meshapi"}],
        },
    }


def _access() -> list[dict[str, Any]]:
    """The ServiceAccount, and a Role with only what the ConfigMap history calls, bound to it.

    Namespaced (a Role, not a ClusterRole), configmaps only, and only the verbs of
    `ConfigMapStore.VERBS`: no delete, no watch, no pods (peers are found through DNS, not the
    API). Names cannot narrow it further: the history's entries are named by their hashes.
    """
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coordinator"}}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "coordinator"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": list(VERBS)}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "coordinator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "coordinator"},
        # Without a namespace, the subject is the ServiceAccount of the binding's namespace.
        "subjects": [{"kind": "ServiceAccount", "name": "coordinator"}],
    }
    return [account, role, binding]


def default_replicas(history: HistoryBackend) -> int:
    return 3 if history is HistoryBackend.CONFIGMAPS else 1


def coordinator_resources(
    platform: Platform,
    *,
    image: str = COORDINATOR_IMAGE,
    history: HistoryBackend = HistoryBackend.CONFIGMAPS,
    replicas: int | None = None,
    namespace: str | None = None,
) -> list[dict[str, Any]]:
    """The Coordinator: replicas on ConfigMaps (with their RBAC and peer Service), or one on a PVC.

    With `namespace`, every resource names it (and the RoleBinding's subject); without, they go
    where `kubectl apply -n` puts them.
    """
    count = _replica_count(history, replicas)
    container = _coordinator_container(platform, image, history)
    pod_spec: dict[str, Any] = {"runtimeClassName": platform.runtime_class_name}
    spec: dict[str, Any] = {
        "replicas": count,
        "serviceName": "coordinator",
        "selector": {"matchLabels": dict(COORDINATOR_LABELS)},
        "template": {
            "metadata": {
                "labels": dict(COORDINATOR_LABELS),
                "annotations": {ROLE_ANNOTATION: "coordinator"},
            },
            "spec": pod_spec,
        },
    }
    resources: list[dict[str, Any]] = []
    if history is HistoryBackend.FILES:
        _keep_history_in_files(container, spec)
    else:
        _keep_history_in_configmaps(container, spec, pod_spec)
        resources += _access()
    pod_spec["containers"] = [container]
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "coordinator", "labels": dict(COORDINATOR_LABELS)},
        "spec": spec,
    }
    resources += [
        statefulset,
        _service("coordinator", load_balancer=True, publish_not_ready=True),
        _service("coordinator-ready", load_balancer=False, publish_not_ready=False),
    ]
    if history is HistoryBackend.CONFIGMAPS:
        resources.append(_peer_service())
    if namespace is not None:
        _place_in_namespace(resources, namespace)
    return resources


def _replica_count(history: HistoryBackend, replicas: int | None) -> int:
    """The replicas asked for (or the backend's default), refused where they cannot work."""
    count = default_replicas(history) if replicas is None else replicas
    if count < 1:
        raise ReleaseError(f"--replicas {count}: a Coordinator needs at least one replica")
    if count > 1 and history is HistoryBackend.FILES:
        raise ReleaseError(
            f"--replicas {count} needs --history configmaps: replicas cannot share a"
            " ReadWriteOnce file-system volume"
        )
    return count


def _probe(path: str, period: int, threshold: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": HTTP_PORT},
        "periodSeconds": period,
        "failureThreshold": threshold,
    }


def _coordinator_container(
    platform: Platform, image: str, history: HistoryBackend
) -> dict[str, Any]:
    """The Coordinator's container, as every history backend runs it."""
    return {
        "name": "coordinator",
        "image": image,
        "args": ["coordinator", "--history", str(history)],
        # On an emulated platform the TEE is the emulated runtime's socket in the pod.
        "env": [{"name": "CONTRAST_TEE", "value": "emulated" if platform.emulated else "hardware"}],
        "ports": _ports(),
        "resources": {"limits": {"memory": "200Mi"}, "requests": {"memory": "200Mi"}},
        "startupProbe": _probe("/probe/startup", 1, 60),
        "livenessProbe": _probe("/probe/liveness", 10, 3),
        "readinessProbe": _probe("/probe/readiness", 5, 3),
    }


def _keep_history_in_files(container: dict[str, Any], spec: dict[str, Any]) -> None:
    """One replica whose history is on its own volume, deleted with the StatefulSet."""
    container["args"] += ["--state-dir", STATE_DIR]
    container["volumeMounts"] = [{"name": "state", "mountPath": STATE_DIR}]
    spec["volumeClaimTemplates"] = [
        {
            "metadata": {"name": "state"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    ]
    spec["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": "Delete"}


def _keep_history_in_configmaps(
    container: dict[str, Any], spec: dict[str, Any], pod_spec: dict[str, Any]
) -> None:
    """Replicas that share the history in ConfigMaps and find each other by the peer Service."""
    # The namespace comes from the service account mount, the API from in-cluster config;
    # ready peers from the headless Service's DNS name.
    container["args"] += ["--peer-service", f"{PEER_SERVICE}:{MESH_API_PORT}"]
    pod_spec["serviceAccountName"] = "coordinator"
    spec["serviceName"] = PEER_SERVICE
    # A restarted replica must not wait for the others' order: it recovers from any of them.
    spec["podManagementPolicy"] = "Parallel"
    pod_spec["affinity"] = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": dict(COORDINATOR_LABELS)},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }


def _place_in_namespace(resources: list[dict[str, Any]], namespace: str) -> None:
    """Name `namespace` in every resource and in every RoleBinding subject."""
    for resource in resources:
        resource["metadata"]["namespace"] = namespace
        for subject in resource.get("subjects", []):
            subject["namespace"] = namespace
