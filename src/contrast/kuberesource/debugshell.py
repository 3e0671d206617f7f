"""The insecure debug shell (`generate --insecure-enable-debug-shell-access`), as the original.

The original appends a `contrast-debug-shell` sidecar to every confidential pod and adds
`'contrast.insecure-debug' = 'true'` to the pod's initdata, which its guest image reads to start
an SSH service the sidecar's `debugshell` connects to. The initdata entry is what matters for
trust: it is part of the document whose hash the TEE reports, so the policy hash in the manifest,
and hence the attestation, differs from the same pod without it, and `contrast verify` warns for
each such policy.

This release has no guest SSH service and no debugshell image: its sidecar runs the Initializer's
release image (so that its policy is computed from the recorded facts, as the other injected
containers') holding still until it is stopped, an exec target inside the pod VM
(`kubectl exec -it POD -c contrast-debug-shell -- /usr/bin/python3.11`) once `settings.json`
allows exec, as the original's how-to describes.
"""

from __future__ import annotations

from typing import Any

from contrast.kuberesource.release import INITIALIZER_IMAGE
from contrast.kuberesource.releaseimages import PYTHON
from contrast.kuberesource.workloads import ResourceError, Workload

NAME = "contrast-debug-shell"
INITDATA_ENTRY = "contrast.insecure-debug"
INITDATA_VALUE = "true"
MEMORY = "50Mi"
# Waits for SIGTERM: the image has Python but no coreutils (no `sleep`).
HOLD = (PYTHON, "-c", "import signal; signal.sigwait({signal.SIGTERM, signal.SIGINT})")


def container() -> dict[str, Any]:
    return {
        "name": NAME,
        "image": INITIALIZER_IMAGE,
        "command": list(HOLD),
        "restartPolicy": "Always",
        "resources": {"limits": {"memory": MEMORY}, "requests": {"memory": MEMORY}},
    }


def inject(workload: Workload) -> bool:
    """Append the sidecar to the init containers (replacing one of its name); whether it changed."""
    spec = workload.pod_spec
    containers = spec.get("initContainers")
    if containers is None:
        containers = spec["initContainers"] = []
    if not isinstance(containers, list):
        raise ResourceError(f"{workload.describe()}: spec.initContainers is not a list")
    wanted = container()
    existing = [c for c in containers if isinstance(c, dict) and c.get("name") == NAME]
    if existing == [wanted] and containers[-1] == wanted:
        return False
    containers[:] = [c for c in containers if not (isinstance(c, dict) and c.get("name") == NAME)]
    containers.append(wanted)
    return True


def remove(workload: Workload) -> bool:
    """Take the sidecar out again (a run without the flag); whether it was there."""
    containers = workload.pod_spec.get("initContainers")
    if not isinstance(containers, list):
        return False
    kept = [c for c in containers if not (isinstance(c, dict) and c.get("name") == NAME)]
    if len(kept) == len(containers):
        return False
    if kept:
        containers[:] = kept
    else:  # the list `inject` made for it (the Coordinator has no other init container)
        del workload.pod_spec["initContainers"]
    return True
