"""The node side of the emulated runtime: its settings, and what it keeps per pod.

The launcher that containerd runs as its runc (`launcher.py`) passes the settings in the
environment: which emulated platform, where the real runc is, where the node's emulated roots of
trust are (root-only; never mounted into a pod) and where the per-pod records live.

Per pod (sandbox id), below the state directory: the initdata the sandbox was started with (the
only one its containers and its TEE ever use), the policy's state (`data.pstate` of Kata's rules,
carried between the separate runc calls of one pod under a lock), the directory holding the
pod's TEE socket, which is bind-mounted into every container of the pod, and its owner: the
process that created the sandbox (containerd's shim), which lives as long as the pod, so that a
sandbox whose shim is gone without a `delete` (killed, crashed, a node restarted) can be told
from a live one (`reaper`). Per container: the sandbox it belongs to, for `exec` and `delete`,
whose command lines carry only the container id.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contrast.attestation.emulated.socketpath import SOCKET_NAME
from contrast.errors import ContrastError
from contrast.files import exclusive_lock, write_atomically

PLATFORM_ENV = "CONTRAST_EMULATED_PLATFORM"
RUNC_ENV = "CONTRAST_EMULATED_RUNC"
STATE_ENV = "CONTRAST_EMULATED_STATE"
ROOTS_ENV = "CONTRAST_EMULATED_ROOTS"
DEFAULT_STATE = "/run/contrast-emulated-runtime"
DEFAULT_ROOTS = "/var/lib/contrast-emulated-runtime/roots"
PLATFORMS = ("emulated-snp", "emulated-tdx")
ROOTS_MODE = 0o700
# containerd's ids are 64 hex digits; `ctr` lets people pick names. Nothing that walks paths.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class EmulatedRuntimeError(ContrastError):
    """A request the emulated runtime refuses, or a node it cannot work on."""


@dataclass(frozen=True)
class NodeSettings:
    platform: str
    runc: str
    state: Path
    roots: Path

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> NodeSettings:
        platform = environ.get(PLATFORM_ENV, "emulated-snp")
        if platform not in PLATFORMS:
            raise EmulatedRuntimeError(
                f"{PLATFORM_ENV}={platform!r} is not one of {', '.join(PLATFORMS)}"
            )
        runc = environ.get(RUNC_ENV) or "runc"
        if not os.path.isabs(runc):  # a bare name, as containerd's PATH finds it
            runc = shutil.which(runc, path=environ.get("PATH")) or runc
        return cls(
            platform=platform,
            runc=runc,
            state=Path(environ.get(STATE_ENV, DEFAULT_STATE)),
            roots=Path(environ.get(ROOTS_ENV, DEFAULT_ROOTS)),
        )


def checked_id(value: str, what: str) -> str:
    if not _ID.match(value):
        raise EmulatedRuntimeError(f"{what} {value!r} is not a container id")
    return value


@dataclass(frozen=True)
class Owner:
    """A process, named so that another one given its pid later (or after a reboot) is not it."""

    pid: int
    start: int  # clock ticks after boot, /proc/PID/stat's field 22
    boot: str  # /proc/sys/kernel/random/boot_id

    @classmethod
    def of(cls, pid: int) -> Owner | None:
        """The process `pid` as it runs now; None when it does not run (or is a zombie)."""
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            return None
        # fields[0] is field 3 (state); starttime is field 22.
        if len(fields) < 20 or fields[0] == "Z":
            return None
        return cls(pid, int(fields[19]), boot)

    def runs(self) -> bool:
        return Owner.of(self.pid) == self

    def to_bytes(self) -> bytes:
        return f"{self.pid} {self.start} {self.boot}\n".encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Owner:
        pid, start, boot = data.decode().split()
        return cls(int(pid), int(start), boot)


@dataclass(frozen=True)
class Sandbox:
    """One pod's records on the node."""

    directory: Path

    @property
    def id(self) -> str:
        return self.directory.name

    @property
    def initdata_file(self) -> Path:
        return self.directory / "initdata.toml"

    @property
    def tee_directory(self) -> Path:
        """Mounted into every container of the pod; holds only the TEE socket."""
        return self.directory / "tee"

    @property
    def tee_socket(self) -> Path:
        return self.tee_directory / SOCKET_NAME

    @property
    def server_pid_file(self) -> Path:
        return self.directory / "tee-server.pid"

    @property
    def server_log(self) -> Path:
        return self.directory / "tee-server.log"

    @property
    def owner_file(self) -> Path:
        return self.directory / "owner"

    def owner(self) -> Owner | None:
        """The process that created the sandbox; None when none was recorded (an older runtime's
        sandbox, or one being created this moment) or the record is not one."""
        try:
            return Owner.from_bytes(self.owner_file.read_bytes())
        except (OSError, ValueError, UnicodeDecodeError):
            return None

    @property
    def _state_file(self) -> Path:
        return self.directory / "policy-state.json"

    def server_pid(self) -> int | None:
        """The pid of this sandbox's TEE server if it runs (a reused pid is not it)."""
        try:
            pid = int(self.server_pid_file.read_text())
            command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except (OSError, ValueError, IndexError):
            return None
        if state == "Z" or os.fsencode(str(self.directory)) not in command_line.split(b"\0"):
            return None
        return pid

    def exists(self) -> bool:
        return self.initdata_file.is_file()

    def initdata(self) -> bytes:
        try:
            return self.initdata_file.read_bytes()
        except FileNotFoundError:
            raise EmulatedRuntimeError(
                f"sandbox {self.id} is unknown to the emulated runtime",
                hint="its pause container was not created by this runtime",
            ) from None

    @contextmanager
    def locked(self) -> Iterator[None]:
        with exclusive_lock(self.directory / "lock"):
            yield

    def load_state(self) -> dict[str, Any]:
        """The policy's data document and the runtime's counters (call under `locked`)."""
        try:
            state: dict[str, Any] = json.loads(self._state_file.read_text())
        except FileNotFoundError:
            return {"data": None, "devices": {}}
        return state

    def save_state(self, state: Mapping[str, Any]) -> None:
        write_atomically(self._state_file, json.dumps(state).encode(), mode=0o600)


@dataclass(frozen=True)
class NodeState:
    """The state directory: sandboxes by id, and each container's sandbox."""

    root: Path

    def sandbox(self, sandbox_id: str) -> Sandbox:
        return Sandbox(self.sandboxes_directory / checked_id(sandbox_id, "sandbox id"))

    @property
    def sandboxes_directory(self) -> Path:
        return self.root / "sandboxes"

    def new_sandbox(self, sandbox_id: str, initdata: bytes, owner: Owner) -> Sandbox:
        """The sandbox's directory, its owner recorded first: a reaper skips one without."""
        sandbox = self.sandbox(sandbox_id)
        sandbox.directory.mkdir(parents=True, exist_ok=True, mode=0o711)
        write_atomically(sandbox.owner_file, owner.to_bytes(), mode=0o644)
        sandbox.tee_directory.mkdir(exist_ok=True, mode=0o755)
        os.chmod(sandbox.tee_directory, 0o755)  # noqa: S103 (the pod's users must reach the socket)
        write_atomically(sandbox.initdata_file, initdata, mode=0o644)
        return sandbox

    def _container_file(self, container_id: str) -> Path:
        return self.root / "containers" / checked_id(container_id, "container id")

    def record_container(self, container_id: str, sandbox_id: str) -> None:
        path = self._container_file(container_id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomically(path, sandbox_id.encode(), mode=0o600)

    def sandbox_of(self, container_id: str) -> Sandbox | None:
        try:
            sandbox_id = self._container_file(container_id).read_text()
        except FileNotFoundError:
            return None
        return self.sandbox(sandbox_id)

    def forget_container(self, container_id: str) -> None:
        self._container_file(container_id).unlink(missing_ok=True)

    def container_records(self) -> Iterator[tuple[str, str]]:
        """(container id, sandbox id) of every container recorded."""
        try:
            paths = list((self.root / "containers").iterdir())
        except FileNotFoundError:
            return
        for path in paths:
            try:
                yield path.name, path.read_text()
            except (OSError, UnicodeDecodeError):
                continue
