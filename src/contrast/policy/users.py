"""The user and groups a container runs as, as genpolicy predicts them.

The agent compares `Process.User` (UID, GID, AdditionalGids) exactly, so the prediction must follow
what containerd and the kubelet do, including the quirks Kata's tests pin down
(testdata/kata-policy/README.md, "image facts"):

- the image `User` names a user or uid; workload containers take the primary group from
  `/etc/passwd` and ignore the group part, the pause container uses the group part as written;
- supplementary groups are the `/etc/group` entries listing the user, except a group named like
  the user (a containerd quirk genpolicy copies);
- a pod-level runAsUser/runAsGroup re-derives the groups; container-level ones only change the
  ids and add the new gid; supplementalGroups and fsGroup are added.

With guest pull the guest derives ids from the image itself and has disagreed with the host
(kata #11162), so genpolicy demands that every non-zero id taken from the image be written in
the securityContext; `guest_pull_demands` lists what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contrast.policy.generation_errors import PolicyGenerationError


@dataclass(frozen=True)
class Accounts:
    """`/etc/passwd` and `/etc/group` of an image, indexed."""

    users: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # name → (uid, gid)
    groups: Mapping[str, tuple[int, tuple[str, ...]]] = field(
        default_factory=dict
    )  # name → (gid, members)
    group_order: tuple[str, ...] = ()

    @classmethod
    def parse(cls, etc_passwd: str, etc_group: str) -> Accounts:
        users: dict[str, tuple[int, int]] = {}
        for line in etc_passwd.splitlines():
            parts = line.split(":")
            if len(parts) >= 4 and parts[2].isdigit() and parts[3].isdigit():
                users.setdefault(parts[0], (int(parts[2]), int(parts[3])))
        groups: dict[str, tuple[int, tuple[str, ...]]] = {}
        for line in etc_group.splitlines():
            parts = line.split(":")
            if len(parts) >= 4 and parts[2].isdigit():
                members = tuple(m for m in parts[3].split(",") if m)
                groups.setdefault(parts[0], (int(parts[2]), members))
        return cls(users, groups, tuple(groups))

    def by_uid(self, uid: int) -> tuple[str, int] | None:
        for name, (user_id, gid) in self.users.items():
            if user_id == uid:
                return name, gid
        return None

    def supplementary(self, username: str | None) -> set[int]:
        if not username:
            return set()
        return {
            gid
            for name, (gid, members) in self.groups.items()
            if username in members and name != username
        }


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    additional_gids: frozenset[int]


@dataclass(frozen=True)
class SecurityContexts:
    """The id fields of a pod's and a container's securityContext (None = not set)."""

    pod_run_as_user: int | None = None
    pod_run_as_group: int | None = None
    supplemental_groups: tuple[int, ...] = ()
    fs_group: int | None = None
    run_as_user: int | None = None
    run_as_group: int | None = None

    @classmethod
    def from_yaml(cls, pod: Mapping[str, Any], container: Mapping[str, Any]) -> SecurityContexts:
        pod_context = pod.get("securityContext") or {}
        context = container.get("securityContext") or {}
        if not isinstance(pod_context, Mapping) or not isinstance(context, Mapping):
            raise PolicyGenerationError("securityContext is not a mapping")
        groups = pod_context.get("supplementalGroups") or []
        if not isinstance(groups, list):
            raise PolicyGenerationError("securityContext.supplementalGroups is not a list")
        return cls(
            _id(pod_context, "runAsUser"),
            _id(pod_context, "runAsGroup"),
            tuple(_number(g, "supplementalGroups") for g in groups),
            _id(pod_context, "fsGroup"),
            _id(context, "runAsUser"),
            _id(context, "runAsGroup"),
        )

    @property
    def user(self) -> int | None:
        return self.run_as_user if self.run_as_user is not None else self.pod_run_as_user

    @property
    def group(self) -> int | None:
        return self.run_as_group if self.run_as_group is not None else self.pod_run_as_group


def _number(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PolicyGenerationError(f"securityContext.{name} must be a non-negative integer")
    return value


def _id(context: Mapping[str, Any], name: str) -> int | None:
    value = context.get(name)
    return None if value is None else _number(value, name)


def _resolve(part: str, table: Mapping[str, tuple[int, Any]]) -> int:
    if part.isdigit():
        return int(part)
    if part in table:
        return int(table[part][0])
    return 0  # containerd runs an unknown name as 0 too (and genpolicy only warns)


def image_identity(image_user: str, accounts: Accounts, *, pause: bool) -> Identity:
    user_part, _, group_part = image_user.partition(":")
    uid = _resolve(user_part, accounts.users) if user_part else 0
    entry = accounts.by_uid(uid)
    if pause and group_part:
        gid = _resolve(group_part, accounts.groups)
    else:
        gid = entry[1] if entry else 0
    additional = {gid} | accounts.supplementary(entry[0] if entry else None)
    return Identity(uid, gid, frozenset(additional))


def container_identity(
    image_user: str, accounts: Accounts, contexts: SecurityContexts, *, pause: bool
) -> Identity:
    """The identity the runtime gives the container (pause: only the pod-level fields apply)."""
    identity = image_identity(image_user, accounts, pause=pause)
    uid, gid, additional = identity.uid, identity.gid, set(identity.additional_gids)
    if contexts.pod_run_as_user is not None:
        uid = contexts.pod_run_as_user
        entry = accounts.by_uid(uid)
        gid = entry[1] if entry else 0
        additional = {gid} | accounts.supplementary(entry[0] if entry else None)
    if contexts.pod_run_as_group is not None:
        gid = contexts.pod_run_as_group
        entry = accounts.by_uid(uid)
        additional = {gid} | accounts.supplementary(entry[0] if entry else None)
    if not pause:
        if contexts.run_as_user is not None:
            uid = contexts.run_as_user
            entry = accounts.by_uid(uid)
            if entry:
                gid = entry[1]
        if contexts.run_as_group is not None:
            gid = contexts.run_as_group
            additional.add(gid)
    additional.update(contexts.supplemental_groups)
    if contexts.fs_group is not None:
        additional.add(contexts.fs_group)
    return Identity(uid, gid, frozenset(additional))


def guest_pull_demands(identity: Identity, contexts: SecurityContexts) -> list[str]:
    """The securityContext lines to write when the image decides a non-zero id; [] when none is.

    The suggestion names every non-zero id (not only the missing ones), so the user can copy it.
    """
    explicit_groups = set(contexts.supplemental_groups) | {identity.gid}
    if contexts.fs_group is not None:
        explicit_groups.add(contexts.fs_group)
    implicit_groups = sorted(g for g in identity.additional_gids if g and g not in explicit_groups)
    missing = (
        (identity.uid != 0 and contexts.user is None)
        or (identity.gid != 0 and contexts.group is None)
        or bool(implicit_groups)
    )
    if not missing:
        return []
    lines = []
    if identity.uid != 0:
        lines.append(f"runAsUser: {identity.uid}")
    if identity.gid != 0:
        lines.append(f"runAsGroup: {identity.gid}")
    supplementary = sorted(g for g in identity.additional_gids if g and g != identity.gid)
    if supplementary:
        lines.append(f"supplementalGroups: [{', '.join(str(g) for g in supplementary)}]")
    return lines
