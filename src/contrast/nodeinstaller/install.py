"""Installing a platform's runtime into a host root, in an order that is safe to interrupt.

1. Everything that can be refused is checked before the host changes: the platform, every
   artefact's size and SHA-256, containerd's config (parsed and patched in memory). A refusal
   leaves the host root exactly as it was.
2. Files that are not already in place (same bytes, same mode) are copied into a staging directory
   next to the install directory, on the same file system, checked again, and renamed into place
   one by one. The install directory is named after the runtime's content hash, so no running
   VM uses a file that changes here; a re-run after a crash finishes the job. A Kata config at
   an overridden path is the node's file: written where its links lead, after a backup like
   containerd's config's below unless the installer wrote it.
3. containerd's config is written last, when everything it points at exists: atomically, after a
   backup `<config>.<unix time>.bak` of the old bytes, and only if its bytes change. A config
   that is a symlink is written at its target (backup beside the target), the link stays.
4. containerd is restarted only when its config changed, or when an earlier run changed it but
   could not restart (a `.restart-pending` marker in the install directory remembers that; the
   original compares the unit's start time with the config's mtime instead): through systemd,
   or, on a node whose supervisor is not systemd, by SIGTERM to the pid of the target config's
   `containerd-pid-file` and a wait for the supervisor's next containerd (`pidrestart`).

Every host path is resolved inside the host root as the node sees it (`hostroot`): a link to
`/etc/containerd/real.toml` or an `/opt` that links elsewhere stays inside `--host-root`.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from contrast.nodeinstaller.artefacts import (
    copy_artefact,
    is_installed,
    source_path,
    verify_artefacts,
)
from contrast.nodeinstaller.containerdconfig import (
    AnyRuntime,
    ContainerdRuntime,
    PatchedConfig,
    RuncWrapperRuntime,
    grpc_address,
    patch_containerd_config,
)
from contrast.nodeinstaller.errors import ContainerdConfigError, NodeInstallerError
from contrast.nodeinstaller.hostroot import (
    HostPathError,
    Location,
    Resolver,
    kind_of,
    mode_of,
    read_file,
    write_atomically,
    write_new,
)
from contrast.nodeinstaller.kataconfig import HEADER, render_kata_config, render_template
from contrast.nodeinstaller.pidrestart import restart_by_pid_file
from contrast.nodeinstaller.restart import (
    SYSTEMD_DBUS_RESTART,
    UNIT_PLACEHOLDER,
    Runner,
    restart_containerd,
    run_command,
)
from contrast.nodeinstaller.targetconfig import TargetConfig
from contrast.platforms import Platform
from contrast.runtimedescription.digest import handler_of
from contrast.runtimedescription.model import (
    INSTALL_ROOT,
    ArtefactRole,
    Build,
    RuntimeDescription,
    install_path,
)
from contrast.runtimedescription.shipped import load_runtime

DEFAULT_ARTEFACTS_ROOT = Path("/usr/share/contrast/runtimes")
RESTART_PENDING = ".restart-pending"
KATA_CONFIG_MARK = HEADER.split("{name}")[
    0
].encode()  # how a Kata config the installer wrote starts
CONFIG_MODE = 0o644
EXECUTABLE_MODE = 0o755
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
    containerd_config_target: str  # the file written: the config, or where its links lead
    config_changed: bool
    backup: str | None  # of containerd's config
    restarted: bool
    restarted_unit: str | None
    no_restart_reason: str | None
    # Of a node's own file at an overridden Kata config path (not of one the installer wrote).
    kata_config_backup: str | None = None


def artefacts_dir(cli: Path | None, target: TargetConfig, platform: Platform) -> Path:
    """Where the artefacts are read: `--artefacts`, else the target config, else the image's."""
    if cli is not None:
        return cli
    if target.artefacts_dir is not None:
        return Path(target.artefacts_dir)
    return DEFAULT_ARTEFACTS_ROOT / platform.name


def install_runtime(
    request: InstallRequest,
    *,
    description: RuntimeDescription | None = None,
    runner: Runner = run_command,
    now: Callable[[], float] = time.time,
) -> InstallReport:
    """Install the runtime of `request.platform` (or `description`) into `request.host_root`."""
    platform = request.platform
    description = description or load_runtime(platform.name)
    if description.platform != platform.name:
        raise NodeInstallerError(
            f"the runtime description is for {description.platform}, not {platform.name}"
        )
    with Resolver(request.host_root) as host:
        run = _Run(request, description, host, runner, now, handler_of(description))
        return _install_emulated(run) if platform.emulated else _install(run)


@dataclass(frozen=True)
class _Run:
    """One installer run: what was asked, the runtime, the host root, the seams for restarts
    and time, and the handler (which names the install directory)."""

    request: InstallRequest
    description: RuntimeDescription
    host: Resolver
    runner: Runner
    now: Callable[[], float]
    name: str

    @property
    def install_dir(self) -> PurePosixPath:
        return PurePosixPath(INSTALL_ROOT) / self.name


@dataclass(frozen=True)
class _ConfigPatch:
    """containerd's config as read (`old`: None if there is none), and patched in memory."""

    config: PurePosixPath
    old: bytes | None
    target: PurePosixPath  # where its links lead
    patched: PatchedConfig


def _patch_config(run: _Run, runtime: AnyRuntime) -> _ConfigPatch:
    """Read containerd's config and add `runtime` to it in memory: a refusal writes nothing."""
    config = PurePosixPath("/" + run.request.target.containerd_config_path)
    old, target = _read_config(run.host, config)
    patched = patch_containerd_config(
        None if old is None else old.decode(),
        runtime,
        source=f"containerd config {_shown(config, target)}",
    )
    return _ConfigPatch(config, old, target, patched)


def _install(run: _Run) -> InstallReport:
    request, description, name = run.request, run.description, run.name

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
        render_kata_config(request.platform, description, name)
        if template is None
        else render_template(source_path(request.artefacts_dir, template).read_bytes(), name)
    )
    shim = description.by_role(ArtefactRole.SHIM)
    assert shim is not None
    patch = _patch_config(
        run,
        ContainerdRuntime(
            handler=name,
            shim_path=install_path(shim.path, name),
            kata_config_path=str(kata_config),
            gpu=request.platform.gpu,
        ),
    )

    # 2. Files, staged next to their install directory and renamed into place.
    written, kata_backup = _install_files(
        host=run.host,
        install_dir=run.install_dir,
        description=description,
        source=request.artefacts_dir,
        kata_config=kata_config,
        kata_bytes=kata_bytes,
        now=run.now,
    )

    # 3. containerd's config, last; 4. the restart.
    return _configure(run, patch, written, kata_config_backup=kata_backup)


def _configure(
    run: _Run,
    patch: _ConfigPatch,
    written: tuple[str, ...],
    *,
    kata_config_backup: str | None = None,
) -> InstallReport:
    """Write containerd's config (after a backup) if it changed, restart if needed, and report.

    The last steps of both installs (a VM runtime's and the emulated one's), after `written`.
    """
    host, config, config_target = run.host, patch.config, patch.target
    marker = host.resolve(run.install_dir / RESTART_PENDING, follow=False, create=True)
    backup = None
    if patch.patched.changed:
        write_atomically(marker, f"{config}\n".encode(), mode=CONFIG_MODE)
        target = host.resolve(config, follow=True, create=True)
        config_target = target.path
        mode = CONFIG_MODE
        if patch.old is not None:
            mode = mode_of(target)
            backup = _back_up(target, patch.old, mode, run.now)
        write_atomically(target, patch.patched.text.encode(), mode=mode)
    # Restart, if containerd has not read the config as it now is.
    restarted, unit, reason = _restart(run, marker, patch.patched.text)
    return InstallReport(
        runtime_name=run.name,
        build=run.description.build,
        install_dir=str(run.install_dir),
        written=written,
        containerd_config=str(config),
        containerd_config_target=str(config_target),
        config_changed=patch.patched.changed,
        backup=backup,
        restarted=restarted,
        restarted_unit=unit,
        no_restart_reason=reason,
        kata_config_backup=kata_config_backup,
    )


def _install_emulated(run: _Run) -> InstallReport:
    """The emulated runtime: its launcher as containerd's runc, the node's emulated roots.

    No VM, so no artefacts: the launcher (`emulatedruntime.launcher`) names the node's Python
    and runc from the target config, and the roots (the emulated AMD/Intel keys) are made once
    in a root-only directory of the node that no pod mounts. Without `emulated-python` the
    installer copies its own Python into the install directory (`pythonbundle`) and the
    launcher runs that one; once the launcher is written, the copies of earlier installers that
    no process uses any more are removed (`bundleprune`).
    """
    # Imported here: hardware installs need none of the emulated TEE.
    from contrast.emulatedruntime.launcher import LAUNCHER_NAME, render_launcher  # noqa: PLC0415
    from contrast.emulatedruntime.node import DEFAULT_ROOTS, DEFAULT_STATE  # noqa: PLC0415
    from contrast.emulatedruntime.roots import ensure_roots  # noqa: PLC0415

    request, host = run.request, run.host
    written = []
    python = request.target.emulated_python
    if python is None:
        from contrast.nodeinstaller.pythonbundle import install_bundle  # noqa: PLC0415

        wrapper, copied = install_bundle(host, run.install_dir)
        python = str(wrapper)
        if copied:
            written.append(str(wrapper.parent.parent))
    launcher_path = run.install_dir / "bin" / LAUNCHER_NAME
    launcher = render_launcher(
        platform=request.platform.name,
        python=python,
        runc=request.target.emulated_runc,
        state=Path(DEFAULT_STATE),
        roots=Path(DEFAULT_ROOTS),
    )
    patch = _patch_config(run, RuncWrapperRuntime(handler=run.name, binary_name=str(launcher_path)))

    roots = host.resolve(PurePosixPath(DEFAULT_ROOTS), follow=True, create=True)
    ensure_roots(Path(f"/proc/self/fd/{roots.directory}") / roots.name)
    location = host.resolve(launcher_path, follow=False, create=True)
    if not _holds(location, launcher, EXECUTABLE_MODE):
        write_atomically(location, launcher, mode=EXECUTABLE_MODE)
        written.append(str(launcher_path))
    from contrast.nodeinstaller.bundleprune import prune_bundles  # noqa: PLC0415

    prune_bundles(host, run.install_dir, PurePosixPath(python))
    return _configure(run, patch, tuple(written))


def _back_up(location: Location, data: bytes, mode: int, now: Callable[[], float]) -> str:
    """Write `data` beside `location` as `<name>.<unix time>.bak`; its node path."""
    name = f"{location.name}.{int(now())}.bak"
    backup = Location(location.directory, name, location.path.with_name(name))
    write_atomically(backup, data, mode=mode)
    return str(backup.path)


def _shown(path: PurePosixPath, target: PurePosixPath) -> str:
    return str(path) if path == target else f"{path} (-> {target})"


def _read_config(host: Resolver, config: PurePosixPath) -> tuple[bytes | None, PurePosixPath]:
    """containerd's config (None: no file yet) and where it is once its links are followed."""
    try:
        location = host.resolve(config, follow=True)
    except FileNotFoundError:
        return None, config  # a directory on the way is missing: the config is new
    shown = _shown(config, location.path)
    try:
        data = read_file(location)
    except HostPathError as error:
        raise ContainerdConfigError(f"containerd config {shown}: {error}") from None
    except OSError as error:
        raise ContainerdConfigError(
            f"cannot read containerd config {shown}: {error.strerror or error}"
        ) from None
    if data is None:
        return None, location.path
    try:
        data.decode()
    except UnicodeDecodeError as error:
        raise ContainerdConfigError(f"containerd config {shown} is not UTF-8: {error}") from None
    return data, location.path


def _located(host: Resolver, path: PurePosixPath, *, follow: bool) -> Location | None:
    """Where `path` is, or None if a directory on the way is missing (so is the file)."""
    try:
        return host.resolve(path, follow=follow)
    except FileNotFoundError:
        return None


def _install_files(
    *,
    host: Resolver,
    install_dir: PurePosixPath,
    description: RuntimeDescription,
    source: Path,
    kata_config: PurePosixPath,
    kata_bytes: bytes,
    now: Callable[[], float],
) -> tuple[tuple[str, ...], str | None]:
    """Install what is not in place yet; the node paths written, and a Kata config's backup."""
    pending = []
    for artefact in description.artefacts:
        location = _located(host, install_dir / artefact.relative_path, follow=False)
        if location is None or not is_installed(artefact, location):
            pending.append(artefact)
    kata_inside = kata_config.is_relative_to(install_dir)
    # A config of our own install directory is replaced like an artefact; one elsewhere (an
    # overridden Kata config path) is the node's file, written where its links lead.
    kata_file = _located(host, kata_config, follow=not kata_inside)
    kata_pending = kata_file is None or not _holds(kata_file, kata_bytes, CONFIG_MODE)
    if not kata_inside and kata_file is not None and kind_of(kata_file) == "other":
        raise NodeInstallerError(
            f"Kata config path {_shown(kata_config, kata_file.path)} is not a regular file",
            hint="set kata-config-path in the target config to a file",
        )
    if not pending and not kata_pending:
        return (), None
    parent, _ = host.directory(install_dir.parent, create=True)
    staging = f".{install_dir.name}.staging-{secrets.token_hex(4)}"
    os.mkdir(staging, 0o700, dir_fd=parent)
    try:
        staged_in, _ = host.directory(install_dir.parent / staging, create=False)
        moves: list[tuple[str, PurePosixPath]] = []
        for index, artefact in enumerate(pending):
            copy_artefact(artefact, source_path(source, artefact), staged_in, str(index))
            moves.append((str(index), install_dir / artefact.relative_path))
        if kata_pending and kata_inside:
            write_new(staged_in, "kata-config", kata_bytes, CONFIG_MODE)
            moves.append(("kata-config", kata_config))
        for staged, destination in moves:
            location = host.resolve(destination, follow=False, create=True)
            try:
                os.rename(
                    staged, location.name, src_dir_fd=staged_in, dst_dir_fd=location.directory
                )
            except OSError as error:
                raise NodeInstallerError(
                    f"cannot install {destination} (at {location.path} in host root"
                    f" {host.host_root}): {error.strerror or error}"
                ) from None
            os.fsync(location.directory)
    finally:
        _remove_staging(parent, staging)
    written = [str(destination) for _, destination in moves]
    backup = None
    if kata_pending and not kata_inside:
        # An overridden Kata config path may be on another file system than the staging area.
        # It names a node file, written at its links' target; one the installer did not write
        # is backed up first.
        target = host.resolve(kata_config, follow=True, create=True)
        old = read_file(target)
        if old is not None and not old.startswith(KATA_CONFIG_MARK):
            backup = _back_up(target, old, mode_of(target), now)
        write_atomically(target, kata_bytes, mode=CONFIG_MODE)
        written.append(str(kata_config))
    return tuple(written), backup


def _remove_staging(parent: int, staging: str) -> None:
    """Remove the staging directory and what is left in it (it holds files only)."""
    try:
        descriptor = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except FileNotFoundError:
        return
    try:
        for entry in os.listdir(descriptor):
            os.unlink(entry, dir_fd=descriptor)
    finally:
        os.close(descriptor)
    os.rmdir(staging, dir_fd=parent)


def _holds(location: Location, data: bytes, mode: int) -> bool:
    """Whether the regular file at `location` holds `data` with `mode` (a link does not)."""
    try:
        return (
            kind_of(location) == "file"
            and mode_of(location) == mode
            and (read_file(location) == data)
        )
    except (HostPathError, OSError):
        return False


def _restart(run: _Run, marker: Location, config: str) -> tuple[bool, str | None, str | None]:
    request = run.request
    if kind_of(marker) is None:
        return False, None, "containerd's config was already up to date"
    if not request.restart:
        return False, None, "restart disabled; restart containerd to use the runtime"
    if request.target.containerd_pid_file is not None:
        _restart_by_pid_file(run, request.target.containerd_pid_file, config)
        os.unlink(marker.name, dir_fd=marker.directory)
        return True, None, None
    runner = run.runner
    command: Sequence[str] = request.restart_command
    if not request.target.units and any(UNIT_PLACEHOLDER in a for a in command):
        return False, None, "systemd-unit-name is empty; restart containerd to use the runtime"
    unit = restart_containerd(request.target.units, command=command, runner=runner)
    os.unlink(marker.name, dir_fd=marker.directory)
    return True, unit, None


def _restart_by_pid_file(run: _Run, pid_file: str, config: str) -> None:
    """SIGTERM the containerd of `pid_file` and wait for its supervisor's next one, until the
    socket of containerd's `config` ([grpc] address) accepts a connection."""
    host = run.host
    shown = PurePosixPath("/" + pid_file)

    def read_pid_file() -> bytes | None:
        try:
            return read_file(host.resolve(shown, follow=True))
        except (FileNotFoundError, HostPathError):
            return None

    socket_path = PurePosixPath(grpc_address(config))

    def socket_answers() -> bool:
        try:
            location = host.resolve(socket_path, follow=True)
        except (FileNotFoundError, HostPathError):
            return False
        # Through the directory's descriptor: a host root prefix could overflow sun_path.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(1)
            try:
                client.connect(f"/proc/self/fd/{location.directory}/{location.name}")
            except OSError:
                return False
        return True

    restart_by_pid_file(read_pid_file, shown=str(shown), socket_answers=socket_answers)
