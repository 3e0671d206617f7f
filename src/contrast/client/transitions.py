"""The workspace's `latest-transition`: the head of the Coordinator's history it last saw.

The history is a hash chain whose head moves forward with every manifest. A workspace that
remembers the head it saw can tell when the Coordinator's state was rolled back (an older volume
restored): the remembered head is then missing from the chain the Coordinator serves. `set`,
`verify` and `recover` check that before they write anything, and replace the file only with a
head whose chain contains the one it held, never with an older one. Without the file there is
nothing to check against, and they say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contrast.client.errors import ClientError
from contrast.client.workspace import LATEST_TRANSITION, Workspace, WorkspaceError, read_file
from contrast.history.history import HASH_SIZE, ZERO_HASH, transition_hashes

# The file holds one hex transition hash and a newline: anything much longer is not one.
TRANSITION_MAX_BYTES = 1 << 10
_RESTORE = (
    "restore it from a backup or from verify/latest-transition; delete it only if you accept"
    " that rollback cannot be checked"
)


class HistoryMismatch(ClientError):
    """The Coordinator's history is not one this workspace can accept: rolled back, inconsistent."""


class RolledBack(HistoryMismatch):
    """The head the workspace saw is not in the Coordinator's history."""


@dataclass(frozen=True)
class LastSeen:
    """The workspace's `latest-transition` file, and the head it holds (None: no file)."""

    path: Path
    transition_hash: bytes | None

    @property
    def checkable(self) -> bool:
        return self.transition_hash is not None

    def unchecked_warning(self) -> str:
        return (
            f"rollback of the Coordinator's history could not be checked: {self.path} did not"
            " exist; it now holds the current transition, so later commands check against it"
        )


def last_seen(workspace: Workspace) -> LastSeen:
    """What the workspace remembers; a file that is not one hex transition hash is refused."""
    path = workspace.path(LATEST_TRANSITION)
    if not path.exists():
        return LastSeen(path, None)
    data = read_file(path, "latest transition", TRANSITION_MAX_BYTES, hint=_RESTORE)
    text = data.decode("ascii", "replace").strip()
    try:
        transition_hash = bytes.fromhex(text)
    except ValueError:
        transition_hash = b""
    if len(transition_hash) != HASH_SIZE:
        raise WorkspaceError(
            f"{path} is not a transition hash ({2 * HASH_SIZE} hex digits)",
            hint=_RESTORE,
        )
    return LastSeen(path, transition_hash)


def check_history(
    seen: LastSeen, manifests: Sequence[bytes], head: bytes, *, start: bytes = ZERO_HASH
) -> list[bytes]:
    """The chain of transition hashes the Coordinator serves, checked against what was seen.

    The manifests must hash to the head the Coordinator reports, and the head the workspace saw
    must be in the chain (the Coordinator may have moved on, never back). A chain sent from
    `start` on (GetManifests with Since) begins with `start`: the hashes link it to the head.
    """
    chain = transition_hashes(list(manifests), start=start)
    if start != ZERO_HASH:
        chain.insert(0, start)
    if not chain or chain[-1] != head:
        raise HistoryMismatch(
            "the Coordinator's manifests do not hash to the latest transition it reports"
        )
    if seen.transition_hash is not None and seen.transition_hash not in chain:
        raise RolledBack(
            f"the Coordinator's history does not contain transition {seen.transition_hash.hex()}"
            f" from {seen.path}: its state was rolled back or replaced",
            hint="do not trust this deployment's state; investigate its volume",
        )
    return chain


def record(workspace: Workspace, seen: LastSeen, chain: Sequence[bytes]) -> Path:
    """Remember the head of `chain`, a chain `check_history` accepted against `seen`."""
    if seen.transition_hash is not None and seen.transition_hash not in chain:
        raise AssertionError("record() needs a chain that contains the transition seen")
    return workspace.write_public(LATEST_TRANSITION, chain[-1].hex().encode() + b"\n")
