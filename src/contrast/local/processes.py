"""Local processes of the demo: started with their logs in files, stopped or killed on purpose."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from contrast.local.errors import LocalError


class ProcessError(LocalError):
    """A demo process did not start, or ended when it should not have."""


# Ports are handed out from below the kernel's ephemeral range: one from inside it (as binding
# port 0 gives) may become the source port of any outgoing connection before the process it is
# meant for binds it, which then fails with "Address already in use" (seen in CI: a Coordinator
# replica started seconds after its ports were chosen, while the demo's clients connected).
_LOWEST_PORT = 10000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now, not handed out before by this
    process, and (where the kernel says which ports those are) not an ephemeral port."""
    try:
        ephemeral = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = _LOWEST_PORT
    for _ in range(1000):
        below = ephemeral > _LOWEST_PORT
        port = random.randrange(_LOWEST_PORT, ephemeral) if below else 0  # noqa: S311 - a port
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken: try another
            port = int(probe.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise ProcessError("no free TCP port on loopback", hint="is the machine out of ports?")


class Running(Protocol):
    """A started component, local process or container: watched, stopped, killed."""

    name: str
    log: Path

    def exit_code(self) -> int | None: ...
    def kill(self) -> None: ...
    def stop(self) -> None: ...


def wait_for_port(
    port: int, *, timeout: float, process: Running | None = None, host: str = "127.0.0.1"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and (code := process.exit_code()) is not None:
            raise ProcessError(
                f"{process.name} exited with {code} before listening on port {port}",
                hint=f"see {process.log}",
            )
        with socket.socket() as probe:
            probe.settimeout(0.2)
            if probe.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise ProcessError(f"nothing listens on port {port} after {timeout:.0f} s")


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def exit_code(self) -> int | None:
        return self.popen.poll()

    def kill(self) -> None:
        """SIGKILL: no chance to clean up, as a crashed node would be."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Processes:
    """Every process the demo started, so that all of them end with it."""

    log_dir: Path
    running: list[Process] = field(default_factory=list)

    def start(
        self, name: str, arguments: list[str], *, env: dict[str, str] | None = None
    ) -> Process:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{name}.log"
        environment = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        with log.open("ab") as output:
            popen = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, *arguments],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment,
            )
        process = Process(name, popen, log)
        self.running.append(process)
        return process

    def run(
        self, name: str, arguments: list[str], *, env: dict[str, str] | None = None, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """Run to completion; output is returned (and kept in the log)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        environment = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        result = subprocess.run(  # noqa: S603 - our own interpreter and module
            [sys.executable, *arguments],
            capture_output=True,
            text=True,
            env=environment,
            timeout=timeout,
            check=False,
        )
        (self.log_dir / f"{name}.log").write_text(result.stdout + result.stderr)
        return result

    def stop_all(self) -> None:
        for process in reversed(self.running):
            process.stop()
        self.running.clear()
