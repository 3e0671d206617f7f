"""Ending the sandboxes whose pod is gone without a `delete`: their TEE server and directory.

A sandbox ends with the runc `delete` of its pause container, which containerd's shim sends. When
the shim is killed (`cluster.sh down`, an OOM kill, a crash) or the node restarts, no `delete`
comes, and the pod's TEE server (a process of its own session, which outlives the shim) and its
directory would stay for good. The runtime reaps them itself when it creates a sandbox, the one
moment a node gains one, so that they cannot pile up.

Only what is provably orphaned is reaped: a sandbox whose recorded owner, the process that
created it (the shim, which lives as long as the pod), no longer runs; a pid given to another
process since, or a reboot, is not the owner (`node.Owner`). A sandbox with no owner recorded
(one of an older runtime, or one being created this moment) is left alone, and so is every
sandbox whose owner runs, whatever else is wrong with it.
"""

from __future__ import annotations

import contextlib
import shutil

from contrast.emulatedruntime import teeserver
from contrast.emulatedruntime.node import NodeState, Sandbox, checked_id
from contrast.errors import ContrastError
from contrast.files import exclusive_lock


def orphaned(sandbox: Sandbox) -> bool:
    """True when `sandbox` has a recorded owner and that process no longer runs."""
    owner = sandbox.owner()
    return owner is not None and not owner.runs()


def reap(node: NodeState, keep: str | None = None) -> list[str]:
    """Stop the TEE server and remove the directory and container records of every orphaned
    sandbox of `node` but `keep`; the ids reaped. One reaper at a time per node (a lock file
    beside the sandboxes, not in one: taking a sandbox's own lock would make its directory again).
    """
    try:
        directories = sorted(node.sandboxes_directory.iterdir())
    except FileNotFoundError:
        return []
    reaped: list[str] = []
    with exclusive_lock(node.root / "reap.lock"):
        for directory in directories:
            if directory.name == keep:
                continue
            try:
                sandbox = node.sandbox(checked_id(directory.name, "sandbox id"))
            except ContrastError:
                continue  # not one of ours
            if not orphaned(sandbox):
                continue
            teeserver.stop(sandbox)
            shutil.rmtree(sandbox.directory, ignore_errors=True)
            reaped.append(sandbox.id)
        if reaped:
            gone = set(reaped)
            for container_id, sandbox_id in list(node.container_records()):
                if sandbox_id in gone:
                    with contextlib.suppress(ContrastError):
                        node.forget_container(container_id)
    return reaped
