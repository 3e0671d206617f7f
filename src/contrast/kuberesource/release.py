"""Release resources: the runtime (RuntimeClass + node installer) and the Coordinator.

Shapes follow the original's `internal/kuberesource/parts.go` (research/contrast.md §2.2): the
RuntimeClass carries the VM's memory as `overhead.podFixed` so the scheduler accounts for it; the
node installer is a privileged init container with the host root mounted, followed by `pause`;
the Coordinator is a one-replica StatefulSet whose state lives on a persistent volume, reachable
through `coordinator` (all ports, also when not ready, so the first `set` gets through) and
`coordinator-ready` (ready pods only, for Initializers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contrast.kuberesource.releaseimages import reference
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
STATE_DIR = "/mnt/state"
ROLE_ANNOTATION = "contrast.edgeless.systems/pod-role"
INSTALLER_COMMAND = ("contrast", "node-installer", "--host-root", "/host")
TARGET_CONFIG_MAP = "contrast-node-installer-target-config"
TARGET_CONFIG_DIR = "/config/target-config"
# Where a built runtime's payload (`contrast runtime build`'s runtimes/<handler>/) is on a node,
# unless it comes in an image; the installer reads it through its host-root mount.
PAYLOAD_HOST_DIRECTORY = "/var/lib/contrast/payloads"
PAYLOAD_IMAGE_DIRECTORY = "/usr/share/contrast/runtimes"


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
                "volumeMounts": [
                    {"name": "host-root", "mountPath": "/host"},
                    {"name": "dbus", "mountPath": "/var/run/dbus/system_bus_socket"},
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
            {
                "name": "dbus",
                "hostPath": {"path": "/var/run/dbus/system_bus_socket", "type": "Socket"},
            },
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
    ]


def _service(name: str, *, load_balancer: bool, publish_not_ready: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"app.kubernetes.io/name": "coordinator"},
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


def coordinator_resources(
    platform: Platform, *, image: str = COORDINATOR_IMAGE
) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": "coordinator"}

    def probe(path: str, period: int, threshold: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": path, "port": HTTP_PORT},
            "periodSeconds": period,
            "failureThreshold": threshold,
        }

    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "coordinator", "labels": labels},
        "spec": {
            "replicas": 1,
            "serviceName": "coordinator",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {ROLE_ANNOTATION: "coordinator"}},
                "spec": {
                    "runtimeClassName": platform.runtime_class_name,
                    "containers": [
                        {
                            "name": "coordinator",
                            "image": image,
                            "args": ["coordinator", "--state-dir", STATE_DIR],
                            "env": [{"name": "CONTRAST_TEE", "value": "hardware"}],
                            "ports": _ports(),
                            "resources": {
                                "limits": {"memory": "200Mi"},
                                "requests": {"memory": "200Mi"},
                            },
                            "startupProbe": probe("/probe/startup", 1, 60),
                            "livenessProbe": probe("/probe/liveness", 10, 3),
                            "readinessProbe": probe("/probe/readiness", 5, 3),
                            "volumeMounts": [{"name": "state", "mountPath": STATE_DIR}],
                        }
                    ],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "state"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"},
        },
    }
    return [
        statefulset,
        _service("coordinator", load_balancer=True, publish_not_ready=True),
        _service("coordinator-ready", load_balancer=False, publish_not_ready=False),
    ]
