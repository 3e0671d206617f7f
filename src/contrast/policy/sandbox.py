"""The pod names a workload's pods can have, as the regex the rules match the sandbox name with.

Controllers name their pods: a Deployment's are `<name>-<replicaset hash>-<suffix>`, a
StatefulSet's `<name>-<ordinal>`, a Job's `<name>[-<index>]-<suffix>`, a CronJob's
`<name>-<scheduled time>[-<index>]-<suffix>` (research/policy.md §2). The random parts use
Kubernetes' safe alphabet (no vowels, no digits that look like letters).
"""

from __future__ import annotations

from contrast.kuberesource.workloads import Workload
from contrast.policy.generation_errors import PolicyGenerationError

SAFE = "[bcdfghjklmnpqrstvwxz2456789]+"


def _escape(name: str) -> str:
    # Kubernetes names are DNS subdomains: only `.` is special in a regex.
    return name.replace(".", "\\.")


def sandbox_name_regex(workload: Workload) -> str:
    name = _escape(workload.name)
    kind = workload.kind
    if kind == "Pod":
        if name:
            return f"^{name}$"
        if workload.generate_name:
            return f"^{_escape(workload.generate_name)}{SAFE}$"
    elif not name:
        pass
    elif kind == "Deployment":
        return f"^{name}-{SAFE}-{SAFE}$"
    elif kind in ("ReplicaSet", "ReplicationController", "DaemonSet"):
        return f"^{name}-{SAFE}$"
    elif kind == "StatefulSet":
        return f"^{name}-[0-9]+$"
    elif kind == "Job":
        return f"^{name}(-[0-9]+)?-{SAFE}$"
    elif kind == "CronJob":
        return f"^{name}-[0-9]+(-[0-9]+)?-{SAFE}$"
    raise PolicyGenerationError(
        f"{workload.describe()} has no metadata.name"
        + (" or generateName" if kind == "Pod" else ""),
        hint="name the resource, its pods' names are derived from it",
    )
