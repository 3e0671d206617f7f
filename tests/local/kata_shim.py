"""The CreateContainer request a Kata agent would see, from the spec containerd made for runc.

Here containerd hands its OCI spec to runc; in a cluster the Kata shim would rewrite the same
spec for the guest and the agent would evaluate it against the pod's policy. The image decides
the fields where images and policies can disagree: `Args` (the executable must exist in the
image: the container really runs), `Env` (the image's, then the pod's), `Cwd` (the image's
WorkingDir), `User` (the image's user and, from its /etc/group, the additional groups) and the
capabilities; those come from containerd's spec as it is. What only the node and the shim add
(the sandbox and bundle ids, the shared-directory mount sources, the CRI annotations and the
namespaces) is filled into the policy entry's own placeholders with concrete values, as the shim
and kubelet would, so it is not what this check tests.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

import hypothesis
from hypothesis import strategies

SHARED = "/run/kata-containers/shared/containers"
CAPABILITY_KINDS = {
    "bounding": "Bounding", "effective": "Effective", "inheritable": "Inheritable",
    "permitted": "Permitted", "ambient": "Ambient",
}  # fmt: skip


def _hex(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


def _example(pattern: str) -> str:
    """The shortest string the policy's regular expression admits (deterministic)."""
    compiled = re.compile(pattern)
    return str(
        hypothesis.find(
            strategies.from_regex(compiled, fullmatch=True),
            lambda _: True,
            settings=hypothesis.settings(database=None, max_examples=100),
        )
    )


def create_container_request(
    entry: dict[str, Any], spec: dict[str, Any], *, container: str, sandbox: str
) -> dict[str, Any]:
    """The request for policy entry `entry` and containerd's runc spec `spec`."""
    bundle_id = _hex(f"bundle {container}")
    sandbox_id = _hex(f"sandbox {sandbox}")
    oci = copy.deepcopy(entry["OCI"])
    oci["Root"]["Path"] = f"/run/kata-containers/{bundle_id}/rootfs"
    for mount in oci["Mounts"]:
        source = mount["source"]
        if source.startswith("$(sfprefix)"):
            name = re.sub(r"\\(.)", r"\1", source.removeprefix("$(sfprefix)").rstrip("$"))
            mount["source"] = f"{SHARED}/{bundle_id}-{_hex(name)[:16]}-{name}"
        elif source.startswith("^"):
            mount["source"] = _example(source)
    annotations = oci["Annotations"]
    for key, pattern in list(annotations.items()):
        value = pattern.replace("$(bundle-id)", bundle_id)
        if key == "io.kubernetes.cri.sandbox-id":
            value = sandbox_id
        elif key == "io.kubernetes.cri.sandbox-namespace" and not value:
            value = "default"  # a policy without a namespace takes the first one it sees
        elif value.startswith("^"):
            value = _example(value)
        annotations[key] = value
    process = spec["process"]
    caps = process.get("capabilities", {})
    oci["Process"].update(
        {
            "Args": process["args"],
            "Env": process["env"],
            "Cwd": process["cwd"],
            "User": {
                "UID": process["user"]["uid"],
                "GID": process["user"]["gid"],
                "AdditionalGids": process["user"].get("additionalGids", []),
                "Username": "",
            },
            "Capabilities": {kata: caps.get(runc, []) for runc, kata in CAPABILITY_KINDS.items()},
        }
    )
    oci["Linux"]["Resources"] = {"Devices": []}
    storages = copy.deepcopy(entry.get("storages", []))
    for storage in storages:
        if storage["mount_point"].startswith("^"):
            storage["mount_point"] = _example(storage["mount_point"])
    return {
        "container_id": bundle_id,
        "exec_id": bundle_id,
        "OCI": oci,
        "storages": storages,
        "devices": [],
        "sandbox_pidns": entry.get("sandbox_pidns", False),
    }
