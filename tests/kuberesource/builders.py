"""Valid resources of every workload kind, and the schema check the tests apply to them."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate

from contrast.kuberesource.yamlio import to_plain

KUBERNETES = "1.33"
KINDS = (
    "Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController",
    "Job", "CronJob",
)  # fmt: skip
API_VERSIONS = {
    "Pod": "v1",
    "ReplicationController": "v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}
LABELS = {"app.kubernetes.io/name": "app"}


def pod_spec(**extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "ghcr.io/example/app:v1",
                "resources": {"limits": {"memory": "100Mi"}, "requests": {"memory": "100Mi"}},
            }
        ]
    }
    spec.update(extra)
    return spec


def resource(
    kind: str,
    spec: dict[str, Any] | None = None,
    *,
    annotations: dict[str, str] | None = None,
    name: str = "app",
    namespace: str | None = None,
) -> dict[str, Any]:
    """A resource of `kind` running a pod with `spec` (default: one container)."""
    spec = copy.deepcopy(spec if spec is not None else pod_spec())
    pod_metadata: dict[str, Any] = {"labels": dict(LABELS)}
    if annotations:
        pod_metadata["annotations"] = dict(annotations)
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    api_version = API_VERSIONS.get(kind, "apps/v1")
    if kind == "Pod":
        metadata.update(pod_metadata)
        return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}
    if kind in ("Job", "CronJob"):
        spec.setdefault("restartPolicy", "OnFailure")
    template = {"metadata": pod_metadata, "spec": spec}
    if kind == "CronJob":
        body: dict[str, Any] = {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": template}},
        }
    elif kind == "Job":
        body = {"template": template}
    elif kind == "ReplicationController":
        body = {"selector": dict(LABELS), "template": template}
    else:
        body = {"selector": {"matchLabels": dict(LABELS)}, "template": template}
        if kind == "StatefulSet":
            body["serviceName"] = name
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": body}


def validate(document: Any) -> None:
    """Strict schema validation (unknown fields are errors) of a plain or ruamel document."""
    kubernetes_validate.validate(to_plain(document), KUBERNETES, strict=True)
