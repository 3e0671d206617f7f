"""A container's mounts and the agent storages behind them, as the runtime will request them.

The mounts start from containerd's default spec, then the settings' mount templates replace or
add entries (sources of bind templates become `$(sfprefix)<file name>$`, the shared-directory
file the runtime copies in), then each YAML volumeMount, then each image VOLUME the YAML does not
cover. Storages appear only for volumes the guest mounts itself: emptyDir (per
`cluster_config.emptydir_type`), and configMap/secret when `enable_configmap_secret_storages`.
With guest pull the image itself is not a policy storage (the rules let `image_guest_pull` pass).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from contrast.policy.generation_errors import PolicyGenerationError
from contrast.policy.settings import Settings

# emptydir_type → the settings volume template it selects
EMPTYDIR_TEMPLATES = {
    "block-encrypted": "emptyDir_encrypted",
    "block-plain": "emptyDir_plain",
    "shared-fs": "emptyDir",
}
FS_GROUP_CHANGE_POLICIES = {"Always": 0, "OnRootMismatch": 1}


def mount(destination: str, source: str, type_: str, options: Sequence[str]) -> dict[str, Any]:
    return {"destination": destination, "source": source, "type_": type_, "options": list(options)}


def storage(
    template: Mapping[str, Any],
    mount_point: str,
    *,
    source: str | None = None,
    fs_group: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """An agent Storage message with all eight fields, in the proto's order."""
    return {
        "driver": str(template.get("driver", "")),
        "driver_options": list(template.get("driver_options") or []),
        "source": str(template.get("source", "")) if source is None else source,
        "fstype": str(template.get("fstype", "")),
        "options": list(template.get("options") or []),
        "mount_point": mount_point,
        "fs_group": None if fs_group is None else dict(fs_group),
        "shared": bool(template.get("shared", False)),
    }


def normalized_storage(value: Mapping[str, Any]) -> dict[str, Any]:
    """A settings storage as the agent's Storage type serialises it (adds `shared: false`)."""
    return storage(value, str(value.get("mount_point", "")), fs_group=value.get("fs_group"))


def containerd_mounts(*, pause: bool, privileged: bool) -> list[dict[str, Any]]:
    """containerd's default spec mounts (oci/spec.go)."""
    sysfs = "rw" if privileged else "ro"
    mounts = [
        mount("/proc", "proc", "proc", ["nosuid", "noexec", "nodev"]),
        mount("/dev", "tmpfs", "tmpfs", ["nosuid", "strictatime", "mode=755", "size=65536k"]),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
        ),
        mount(
            "/dev/shm",  # noqa: S108 (a mount destination, not a temporary file)
            "shm",
            "tmpfs",
            ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount("/dev/mqueue", "mqueue", "mqueue", ["nosuid", "noexec", "nodev"]),
        mount("/sys", "sysfs", "sysfs", ["nosuid", "noexec", "nodev", sysfs]),
    ]
    if not pause:
        mounts.append(
            mount(
                "/sys/fs/cgroup",
                "cgroup",
                "cgroup",
                ["nosuid", "noexec", "nodev", "relatime", sysfs],
            )
        )
    return mounts


def _put(mounts: list[dict[str, Any]], new: dict[str, Any]) -> None:
    for existing in mounts:
        if existing["destination"] == new["destination"]:
            existing.update(source=new["source"], type_=new["type_"], options=new["options"])
            return
    mounts.append(new)


def _file_name(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) or path


class MountBuilder:
    """Collects one container's mounts and storages."""

    def __init__(self, settings: Settings, where: str) -> None:
        self.settings = settings
        self.where = where
        self.mounts: list[dict[str, Any]] = []
        self.storages: list[dict[str, Any]] = []

    def defaults(
        self, container: Mapping[str, Any], *, pause: bool, privileged: bool, read_only_root: bool
    ) -> None:
        self.mounts = containerd_mounts(pause=pause, privileged=privileged)
        template = self.settings.section("pause_container" if pause else "other_container")
        destinations = set(self.settings.section("mount_destinations"))
        yaml_paths = {m.get("mountPath") for m in container.get("volumeMounts") or []}
        for s_mount in template.get("Mounts") or []:
            destination = str(s_mount.get("destination", ""))
            if destination not in destinations and destination not in yaml_paths:
                continue
            new = mount(
                destination,
                str(s_mount.get("source") or ""),
                str(s_mount.get("type_", "")),
                list(s_mount.get("options") or []),
            )
            if destination == "/dev/termination-log" and container.get("terminationMessagePath"):
                new["destination"] = str(container["terminationMessagePath"])
            if not new["source"] and new["type_"] == "bind":
                new["source"] = f"$(sfprefix){_file_name(destination)}$"
            exists = any(m["destination"] == new["destination"] for m in self.mounts)
            if not exists and not pause and destination in ("/etc/hostname", "/etc/resolv.conf"):
                new["options"].append("ro" if read_only_root else "rw")
            _put(self.mounts, new)

    def volume(
        self,
        volume: Mapping[str, Any],
        volume_mount: Mapping[str, Any],
        fs_group: int | None,
        fs_group_policy: str | None,
    ) -> None:
        path = str(volume_mount.get("mountPath", ""))
        name = str(volume_mount.get("name", ""))
        access = "ro" if volume_mount.get("readOnly") else "rw"
        if volume_mount.get("subPath") or volume_mount.get("subPathExpr"):
            raise PolicyGenerationError(
                f"{self.where}: volumeMount {name!r} uses subPath, which confidential pods do "
                "not support",
                hint="mount the whole volume and point the application at the file",
            )
        volumes = self.settings.section("volumes")
        if "emptyDir" in volume:
            self._empty_dir(
                volumes,
                volume.get("emptyDir") or {},
                path=path,
                name=name,
                access=access,
                fs_group=fs_group,
                fs_group_policy=fs_group_policy,
            )
        elif "configMap" in volume or "secret" in volume:
            template = volumes.get("configMap") or {}
            if self.settings.get("kata_config", "enable_configmap_secret_storages", default=False):
                self.storages.append(
                    storage(
                        template,
                        f"{template.get('mount_point', '')}{_file_name(path)}$",
                        source=f"{template.get('mount_source', '')}{name}$",
                    )
                )
            _put(
                self.mounts,
                mount(
                    path,
                    f"{template.get('mount_point', '')}{_file_name(path)}$",
                    str(template.get("mount_type", "bind")),
                    list(template.get("options") or []),
                ),
            )
        elif "projected" in volume or "downwardAPI" in volume:
            _put(
                self.mounts,
                mount(path, f"$(sfprefix){_file_name(path)}$", "bind", ["rbind", "rprivate", "ro"]),
            )
        elif "persistentVolumeClaim" in volume or "ephemeral" in volume:
            _put(
                self.mounts,
                mount(
                    path, f"$(sfprefix){_file_name(path)}$", "bind", ["rbind", "rprivate", access]
                ),
            )
        elif "hostPath" in volume:
            self._host_path(volume["hostPath"] or {}, volume_mount, path, access)
        else:
            kinds = sorted(k for k in volume if k != "name")
            raise PolicyGenerationError(
                f"{self.where}: volume {name!r} of type {', '.join(kinds) or '?'} is not supported "
                "in confidential pods",
                hint="use emptyDir, configMap, secret, projected, downwardAPI, hostPath or a PVC",
            )

    def _empty_dir(
        self,
        volumes: Mapping[str, Any],
        empty_dir: Mapping[str, Any],
        *,
        path: str,
        name: str,
        access: str,
        fs_group: int | None,
        fs_group_policy: str | None,
    ) -> None:
        if empty_dir.get("medium") == "Memory":
            key = "emptyDir_memory"
        else:
            kind = str(self.settings.get("cluster_config", "emptydir_type", default="shared-fs"))
            if kind not in EMPTYDIR_TEMPLATES:
                raise PolicyGenerationError(
                    f"settings: cluster_config.emptydir_type {kind!r} is not one of "
                    f"{', '.join(EMPTYDIR_TEMPLATES)}"
                )
            key = EMPTYDIR_TEMPLATES[kind]
        template = volumes.get(key) or {}
        block = key in ("emptyDir_encrypted", "emptyDir_plain")
        group = None
        if block and fs_group is not None:
            group = {
                "group_id": fs_group,
                "group_change_policy": FS_GROUP_CHANGE_POLICIES.get(fs_group_policy or "", 0),
            }
        point = str(template.get("mount_point", ""))
        self.storages.append(
            storage(template, point if block else f"{point}{name}$", fs_group=group)
        )
        source = str(template.get("mount_source", ""))
        _put(
            self.mounts,
            mount(
                path,
                f"{source}{name}$" if source else "",
                str(template.get("mount_type", "bind")),
                ["rbind", "rprivate", access],
            ),
        )

    def _host_path(
        self, host_path: Mapping[str, Any], volume_mount: Mapping[str, Any], path: str, access: str
    ) -> None:
        propagation = (
            "rshared" if volume_mount.get("mountPropagation") == "Bidirectional" else "rprivate"
        )
        host = str(host_path.get("path", ""))
        if host.startswith(("/dev/", "/sys/")):
            _put(self.mounts, mount(path, host, "bind", ["rbind", propagation, access]))
        else:
            _put(
                self.mounts,
                mount(
                    path, f"$(sfprefix){_file_name(path)}$", "bind", ["rbind", propagation, access]
                ),
            )

    def image_volume(self, destination: str) -> None:
        while "//" in destination:
            destination = destination.replace("//", "/")
        if any(m["destination"] == destination for m in self.mounts):
            return
        template = self.settings.section("volumes").get("image_volume") or {}
        if not self.settings.guest_pull:
            self.storages.append(storage(template, destination))
        self.mounts.append(
            mount(
                destination,
                f"{template.get('mount_source', '')}{_file_name(destination)}$",
                str(template.get("fstype", "bind")),
                list(template.get("options") or []),
            )
        )
