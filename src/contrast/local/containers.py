"""The release images run for real: a private containerd with runc, fed from a loopback registry.

`contrast demo --containers` and the end-to-end tests run the Coordinator, the Initializers and
the service-mesh proxies as containers of the built images: pushed with `skopeo` into Debian's
`docker-registry` on loopback, pulled by digest by a containerd of their own (own root, state
and socket under one directory, so the host's containerd is not touched), and started with
`ctr` on the host network, as the Kata agent would start them in a pod's VM minus the VM. Paths
are bind-mounted at the same place inside, so arguments mean the same in and out. Needs root.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contrast.local.errors import LocalError
from contrast.local.processes import free_port

NAMESPACE = "contrast"
REPOSITORY = "contrast-python"
TOOLS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "skopeo": "skopeo",
    "docker-registry": "docker-registry",
}
STARTUP_TIMEOUT = 60.0


class ContainerError(LocalError):
    """A container tool is missing, or a container did not do what it should."""


def check_tools() -> None:
    """Refuse early, naming the Debian packages, when a tool is missing or we are not root."""
    missing = sorted({package for tool, package in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        raise ContainerError(
            f"running the images needs {', '.join(missing)}",
            hint=f"apt-get install {' '.join(missing)}",
        )
    if os.geteuid() != 0:
        raise ContainerError("running containers with containerd needs root", hint="use sudo")


def _run(command: Sequence[str], what: str, *, timeout: float = 120) -> str:
    try:
        result = subprocess.run(  # noqa: S603
            list(command), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise ContainerError(f"{what} did not finish within {timeout:.0f} s") from None
    if result.returncode != 0:
        detail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:]
        raise ContainerError(f"{what} failed: {' '.join(detail)}")
    return result.stdout


def _daemon(command: list[str], log: Path, ready: Callable[[], bool]) -> subprocess.Popen[bytes]:
    """Start a daemon with its output in `log`; return once `ready()` holds."""
    with log.open("wb") as output:
        process = subprocess.Popen(  # noqa: S603
            command, stdout=output, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            tail = log.read_text(errors="replace")[-500:]
            raise ContainerError(f"{command[0]} did not start: {tail}")
        time.sleep(0.05)
    return process


def _terminate(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


@dataclass
class Registry:
    """Debian's docker-registry on a loopback port, storage in `directory`."""

    directory: Path
    host: str = ""
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        port = free_port()
        self.host = f"127.0.0.1:{port}"
        config = self.directory / "registry.yml"
        self.directory.mkdir(parents=True, exist_ok=True)
        config.write_text(
            "version: 0.1\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.directory / 'data'}\n"
            f"http:\n  addr: {self.host}\n"
        )
        self.process = _daemon(
            ["docker-registry", "serve", str(config)],
            self.directory / "registry.log",
            lambda: _listening(port),
        )

    def push(self, layout: Path, reference: str, name: str) -> str:
        """Copy `reference` from the OCI layout to this registry; the pullable name by tag."""
        tag = reference.rpartition(":")[2]
        target = f"{self.host}/{REPOSITORY}/{name}:{tag}"
        _run(
            ["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
             f"oci:{layout}:{reference}", f"docker://{target}"],
            f"skopeo copy of {name}",
        )  # fmt: skip
        return target

    def stop(self) -> None:
        _terminate(self.process)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Container:
    """One started container: its name, its log, and the containerd that runs it."""

    name: str
    log: Path
    containerd: Containerd

    def exit_code(self) -> int | None:
        """None while running; the exit status once stopped."""
        return self.containerd.exit_code(self.name)

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (code := self.exit_code()) is None:
            if time.monotonic() > deadline:
                raise ContainerError(f"container {self.name} still runs after {timeout:.0f} s")
            time.sleep(0.1)
        return code

    def kill(self) -> None:
        """SIGKILL, as a crashed node would stop it, then remove it."""
        self.containerd.signal(self.name, signal.SIGKILL)
        self.wait(timeout=30)
        self.containerd.remove(self.name)

    def stop(self) -> None:
        if self.exit_code() is None:
            self.containerd.signal(self.name, signal.SIGTERM)
            try:
                self.wait(timeout=10)
            except ContainerError:
                self.containerd.signal(self.name, signal.SIGKILL)
                self.wait(timeout=30)
        self.containerd.remove(self.name)


@dataclass
class Containerd:
    """A containerd of our own; the OCI spec it hands runc is kept per container (`specs`)."""

    directory: Path
    process: subprocess.Popen[bytes] | None = None
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)

    def start(self) -> None:
        # A socket path must fit in 108 bytes; the work directory may be deep.
        self.sockets = Path(tempfile.mkdtemp(prefix="ctr-", dir="/tmp"))
        self.socket = self.sockets / "containerd.sock"
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "containerd.toml"
        config.write_text(
            "version = 2\n"
            f'root = "{self.directory / "root"}"\n'
            f'state = "{self.sockets / "state"}"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{self.socket}"\n'
        )
        self.process = _daemon(
            ["containerd", "--config", str(config)],
            self.directory / "containerd.log",
            self.socket.exists,
        )

    def command(self, *arguments: str) -> list[str]:
        """A `ctr` command line addressed to this containerd and our namespace."""
        return ["ctr", "--address", str(self.socket), "--namespace", NAMESPACE, *arguments]

    def ctr(self, *arguments: str, what: str, timeout: float = 120) -> str:
        return _run(self.command(*arguments), what, timeout=timeout)

    def pull(self, reference: str) -> None:
        self.ctr("images", "pull", "--plain-http", reference, what=f"pulling {reference}")

    @staticmethod
    def _options(
        env: Mapping[str, str] | None, mounts: Sequence[Path], capabilities: Sequence[str] = ()
    ) -> list[str]:
        options = ["--net-host", *(f"--cap-add=CAP_{name}" for name in capabilities)]
        for key, value in (env or {}).items():
            options.append(f"--env={key}={value}")
        for mount in mounts:
            options.append(f"--mount=type=bind,src={mount},dst={mount},options=rbind:rw")
        return options

    def run(
        self,
        name: str,
        image: str,
        arguments: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[Path] = (),
        log: Path,
    ) -> Container:
        """Start a container in the background, on the host network, `mounts` at their paths."""
        log.parent.mkdir(parents=True, exist_ok=True)
        options = [*self._options(env, mounts), "--detach", f"--log-uri=file://{log}"]
        self.ctr("run", *options, image, name, *arguments, what=f"starting container {name}")
        self.specs[name] = self.spec(name)
        return Container(name, log, self)

    def run_to_completion(
        self,
        name: str,
        image: str,
        arguments: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[Path] = (),
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        """Run a container in the foreground; ctr exits with the container's status."""
        self.remove(name)
        command = self.command("run", *self._options(env, mounts), image, name, *arguments)
        try:
            result = subprocess.run(  # noqa: S603
                command, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            self.signal(name, signal.SIGKILL)
            raise ContainerError(f"container {name} ran longer than {timeout:.0f} s") from None
        self.specs[name] = self.spec(name)
        return result

    def create(
        self,
        name: str,
        image: str,
        arguments: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[Path] = (),
        capabilities: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Create a container without starting it; the spec containerd made for runc."""
        self.remove(name)
        options = self._options(env, mounts, capabilities)
        self.ctr("containers", "create", *options, image, name, *arguments, what=f"creating {name}")
        self.specs[name] = self.spec(name)
        return self.specs[name]

    def spec(self, name: str) -> dict[str, Any]:
        """The OCI runtime spec containerd made for `name`: what the shim hands runc."""
        info = json.loads(self.ctr("containers", "info", name, what=f"inspecting {name}"))
        spec: dict[str, Any] = info["Spec"]
        return spec

    def exit_code(self, name: str) -> int | None:
        """None while the task runs; once it stopped, its status (and the task is deleted)."""
        if name in self.exit_codes:
            return self.exit_codes[name]
        for line in self.ctr("tasks", "list", what="listing tasks").splitlines()[1:]:
            fields = line.split()
            if fields and fields[0] == name and fields[-1] != "STOPPED":
                return None
        # `ctr tasks delete` reports a non-zero status as a warning on stderr.
        result = subprocess.run(  # noqa: S603
            self.command("tasks", "delete", name),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        match = re.search(r"exit code (\d+)", result.stderr)
        self.exit_codes[name] = int(match[1]) if match else 0
        return self.exit_codes[name]

    def signal(self, name: str, number: signal.Signals) -> None:
        with contextlib.suppress(ContainerError):  # already stopped
            self.ctr("tasks", "kill", "--signal", number.name, name, what=f"signalling {name}")

    def remove(self, name: str) -> None:
        self.exit_codes.pop(name, None)
        for command in (("tasks", "delete", name), ("containers", "delete", name)):
            with contextlib.suppress(ContainerError):
                self.ctr(*command, what=f"removing {name}")

    def stop(self) -> None:
        _terminate(self.process)
        shutil.rmtree(self.sockets, ignore_errors=True)
