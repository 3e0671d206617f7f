"""Installing a platform's runtime into a host root, in an order that is safe to interrupt.

1. Everything that can be refused is checked before the host changes: the platform, every
   artefact's size and SHA-256, containerd's config (parsed and patched in memory). A refusal
   leaves the host root exactly as it was.
2. Files that are not already in place (same bytes, same mode) are copied into a staging directory
   next to the install directory, on the same file system, checked again, and renamed into place
   one by one. The install directory is named after the runtime's content hash, so no running
   VM uses a file that changes here; a re-run after a crash finishes the job.
3. containerd's config is written last, when everything it points at exists: atomically, after a
   backup `<config>.<unix time>.bak` of the old bytes, and only if its bytes change.
4. containerd is restarted only when its config changed, or when an earlier run changed it but
   could not restart (a `.restart-pending` marker in the install directory remembers that; the
   original compares the unit's start time with the config's mtime instead).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from contrast.files import write_atomically
from contrast.nodeinstaller.artefacts import (
    copy_artefact,
    is_installed,
    source_path,
    verify_artefacts,
)
from contrast.nodeinstaller.containerdconfig import ContainerdRuntime, patch_containerd_config
from contrast.nodeinstaller.errors import ContainerdConfigError, NodeInstallerError
from contrast.nodeinstaller.kataconfig import render_kata_config, render_template
from contrast.nodeinstaller.restart import (
    SYSTEMD_DBUS_RESTART,
    UNIT_PLACEHOLDER,
    Runner,
    restart_containerd,
    run_command,
)
from contrast.nodeinstaller.runtime import (
    INSTALL_ROOT,
    ArtefactRole,
    Build,
    RuntimeDescription,
    install_path,
    load_runtime,
    runtime_hash_of,
)
from contrast.nodeinstaller.targetconfig import TargetConfig
from contrast.platforms import RUNTIME_CLASS_PREFIX, Platform

DEFAULT_ARTEFACTS_ROOT = Path("/usr/share/contrast/runtimes")
RESTART_PENDING = ".restart-pending"
CONFIG_MODE = 0o644
DIRECTORY_MODE = 0o755


@dataclass(frozen=True)
class InstallRequest:
    host_root: Path
    platform: Platform
    target: TargetConfig
    artefacts_dir: Path
    restart: bool = True
    restart_command: tuple[str, ...] = SYSTEMD_DBUS_RESTART


@dataclass(frozen=True)
class InstallReport:
    """What an installer run did, in host paths (absolute on the node, not under the host root)."""

    runtime_name: str
    build: Build
    install_dir: str
    written: tuple[str, ...]  # artefacts and Kata config that were (re)written
    containerd_config: str
    config_changed: bool
    backup: str | None
    restarted: bool
    restarted_unit: str | None
    no_restart_reason: str | None


def artefacts_dir(cli: Path | None, target: TargetConfig, platform: Platform) -> Path:
    """Where the artefacts are read: `--artefacts`, else the target config, else the image's."""
    if cli is not None:
        return cli
    if target.artefacts_dir is not None:
        return Path(target.artefacts_dir)
    return DEFAULT_ARTEFACTS_ROOT / platform.name


def runtime_name_of(platform: Platform, description: RuntimeDescription) -> str:
    """The handler of this exact runtime (the platform's runtime class for the shipped one)."""
    return f"{RUNTIME_CLASS_PREFIX}-{platform.name}-{runtime_hash_of(description)}"


def install_runtime(
    request: InstallRequest,
    *,
    description: RuntimeDescription | None = None,
    runner: Runner = run_command,
    now: Callable[[], float] = time.time,
) -> InstallReport:
    """Install the runtime of `request.platform` (or `description`) into `request.host_root`."""
    platform = request.platform
    if platform.emulated:
        raise NodeInstallerError(
            f"platform {platform.name} runs workloads as local processes; there is no runtime"
            " to install on a node",
            hint="choose a hardware platform, e.g. metal-qemu-snp",
        )
    description = description or load_runtime(platform.name)
    if description.platform != platform.name:
        raise NodeInstallerError(
            f"the runtime description is for {description.platform}, not {platform.name}"
        )
    host = request.host_root
    if not host.is_dir():
        raise NodeInstallerError(f"host root {host} is not a directory")
    name = runtime_name_of(platform, description)
    install_dir = PurePosixPath(INSTALL_ROOT) / name

    # 1. Every check before the first change.
    verify_artefacts(description, request.artefacts_dir)
    assert description.kata_config is not None  # the model demands it of a runtime with artefacts
    kata_config = PurePosixPath(
        f"/{request.target.kata_config_path}"
        if request.target.kata_config_path is not None
        else install_path(description.kata_config, name)
    )
    template = description.by_role(ArtefactRole.KATA_CONFIG)
    kata_bytes = (
        render_kata_config(platform, description, name)
        if template is None
        else render_template(source_path(request.artefacts_dir, template).read_bytes(), name)
    )
    shim = description.by_role(ArtefactRole.SHIM)
    assert shim is not None
    config = PurePosixPath("/" + request.target.containerd_config_path)
    config_file = _on_host(host, config)
    old_config = _read_config(config_file)
    patched = patch_containerd_config(
        None if old_config is None else old_config.decode(),
        ContainerdRuntime(
            handler=name,
            shim_path=install_path(shim.path, name),
            kata_config_path=str(kata_config),
            gpu=platform.gpu,
        ),
    )

    # 2. Files, staged next to their install directory and renamed into place.
    written = _install_files(
        host=host,
        install_dir=install_dir,
        description=description,
        source=request.artefacts_dir,
        kata_config=kata_config,
        kata_bytes=kata_bytes,
    )

    # 3. containerd's config, last.
    marker = _on_host(host, install_dir / RESTART_PENDING)
    backup = None
    if patched.changed:
        write_atomically(marker, f"{config}\n".encode(), mode=CONFIG_MODE)
        mode = CONFIG_MODE
        if old_config is not None:
            mode = stat.S_IMODE(config_file.stat().st_mode)
            backup = f"{config}.{int(now())}.bak"
            write_atomically(_on_host(host, PurePosixPath(backup)), old_config, mode=mode)
        write_atomically(config_file, patched.text.encode(), mode=mode)

    # 4. Restart, if containerd has not read the config as it now is.
    restarted, unit, reason = _restart(request, marker, runner)
    return InstallReport(
        runtime_name=name,
        build=description.build,
        install_dir=str(install_dir),
        written=written,
        containerd_config=str(config),
        config_changed=patched.changed,
        backup=backup,
        restarted=restarted,
        restarted_unit=unit,
        no_restart_reason=reason,
    )


def _on_host(host: Path, path: PurePosixPath) -> Path:
    return host / str(path).lstrip("/")


def _read_config(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ContainerdConfigError(f"cannot read containerd config {path}: {error}") from error
    try:
        data.decode()
    except UnicodeDecodeError as error:
        raise ContainerdConfigError(f"containerd config {path} is not UTF-8: {error}") from error
    return data


def _install_files(
    *,
    host: Path,
    install_dir: PurePosixPath,
    description: RuntimeDescription,
    source: Path,
    kata_config: PurePosixPath,
    kata_bytes: bytes,
) -> tuple[str, ...]:
    pending = [
        artefact
        for artefact in description.artefacts
        if not is_installed(artefact, _on_host(host, install_dir / artefact.relative_path))
    ]
    kata_file = _on_host(host, kata_config)
    kata_pending = not _holds(kata_file, kata_bytes, CONFIG_MODE)
    kata_inside = kata_config.is_relative_to(install_dir)
    if not pending and not kata_pending:
        return ()
    parent = _on_host(host, install_dir.parent)
    parent.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{install_dir.name}.staging-", dir=parent))
    try:
        moves: list[tuple[Path, Path, str]] = []
        for index, artefact in enumerate(pending):
            staged = staging / str(index)
            copy_artefact(artefact, source_path(source, artefact), staged)
            installed = install_dir / artefact.relative_path
            moves.append((staged, _on_host(host, installed), str(installed)))
        if kata_pending and kata_inside:
            staged = staging / "kata-config"
            write_atomically(staged, kata_bytes, mode=CONFIG_MODE)
            moves.append((staged, kata_file, str(kata_config)))
        for staged, destination, _ in moves:
            _make_directories(destination.parent)
            os.replace(staged, destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    written = [shown for _, _, shown in moves]
    if kata_pending and not kata_inside:
        # An overridden Kata config path may be on another file system than the staging area.
        write_atomically(kata_file, kata_bytes, mode=CONFIG_MODE)
        written.append(str(kata_config))
    return tuple(written)


def _make_directories(path: Path) -> None:
    path.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)


def _holds(path: Path, data: bytes, mode: int) -> bool:
    try:
        return stat.S_IMODE(path.lstat().st_mode) == mode and path.read_bytes() == data
    except OSError:
        return False


def _restart(
    request: InstallRequest, marker: Path, runner: Runner
) -> tuple[bool, str | None, str | None]:
    if not marker.exists():
        return False, None, "containerd's config was already up to date"
    if not request.restart:
        return False, None, "restart disabled; restart containerd to use the runtime"
    command: Sequence[str] = request.restart_command
    if not request.target.units and any(UNIT_PLACEHOLDER in a for a in command):
        return False, None, "systemd-unit-name is empty; restart containerd to use the runtime"
    unit = restart_containerd(request.target.units, command=command, runner=runner)
    marker.unlink()
    return True, unit, None
