"""One pod's emulated TEE: a process per sandbox serving its socket with the node's roots.

The runtime starts it when it creates the pod's sandbox and stops it when it deletes the
sandbox, or, when no delete came (the shim was killed), when it reaps the sandbox (`reaper`).
It reads the initdata the sandbox was created with once, at start, so its HOSTDATA / MRCONFIGID
cannot change for the life of the pod, and it holds the emulated roots' keys in a process of the
node, never in the pod.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from contrast.api import teeendpoint as endpoint
from contrast.emulatedruntime.node import EmulatedRuntimeError, NodeSettings, Sandbox
from contrast.policy import initdata

START_TIMEOUT = 30.0
CONNECTION_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0


def make_signer(platform: str, roots: Path, initdata_toml: bytes) -> endpoint.Signer:
    """The issuer of this pod: the node's emulated TEE, the policy hash fixed from initdata."""
    from contrast.atls.issuers import EmulatedSnpIssuer, EmulatedTdxIssuer  # noqa: PLC0415

    policy_hash = initdata.policy_hash(initdata_toml)
    if platform == "emulated-tdx":
        from contrast.attestation.emulated.tdx import EmulatedTdx  # noqa: PLC0415

        return EmulatedTdxIssuer(EmulatedTdx(roots), policy_hash)
    from contrast.attestation.emulated.snp import EmulatedSnp  # noqa: PLC0415

    return EmulatedSnpIssuer(EmulatedSnp(roots), policy_hash)


def serve(sandbox: Sandbox, settings: NodeSettings) -> None:
    """Serve `sandbox`'s TEE socket until SIGTERM (the foreground of the server process)."""
    toml = sandbox.initdata()
    signer = make_signer(settings.platform, settings.roots, toml)
    policy_text = initdata.Initdata.from_toml(toml).policy
    if policy_text is not None:
        from contrast.emulatedruntime.evaluator import PolicyServer  # noqa: PLC0415

        PolicyServer(policy_text).start(sandbox.directory)
    path = sandbox.tee_socket
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound by its name in its directory: the full path (64-digit sandbox ids) is longer than a
    # socket address may be. The process has nothing else to do in another directory.
    os.chdir(path.parent)
    listener.bind(path.name)
    # Any user of the pod may ask; only REPORT_DATA is theirs to choose.
    os.chmod(path.name, 0o666)  # noqa: S103
    listener.listen(16)
    lock = threading.Lock()  # one signature at a time: the issuers are not built for threads

    def handle(connection: socket.socket) -> None:
        with connection:
            connection.settimeout(CONNECTION_TIMEOUT)
            with contextlib.suppress(OSError), lock:
                endpoint.answer(connection, signer)

    def leave(*_: object) -> None:
        with contextlib.suppress(OSError):
            path.unlink()
        os._exit(0)

    signal.signal(signal.SIGTERM, leave)
    signal.signal(signal.SIGINT, leave)
    sandbox.server_pid_file.write_text(str(os.getpid()))
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=handle, args=(connection,), daemon=True).start()


def start(sandbox: Sandbox, settings: NodeSettings) -> None:
    """Start the server of `sandbox` in its own session and wait until its socket answers."""
    stop(sandbox)
    sandbox.server_pid_file.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "contrast.emulatedruntime",
        "tee-server",
        str(sandbox.directory),
    ]
    with open(sandbox.server_log, "ab") as log:
        process = subprocess.Popen(  # noqa: S603
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while not (sandbox.server_pid_file.exists() and sandbox.tee_socket.exists()):
        if process.poll() is not None:
            raise EmulatedRuntimeError(
                f"the emulated TEE of sandbox {sandbox.id} did not start: "
                + _last_line(sandbox.server_log)
            )
        if time.monotonic() > deadline:
            process.kill()
            raise EmulatedRuntimeError(f"the emulated TEE of sandbox {sandbox.id} did not start")
        time.sleep(0.02)


def stop(sandbox: Sandbox) -> None:
    """Stop the server of `sandbox`, if it runs (only the process that serves this sandbox):
    SIGTERM, and SIGKILL if it still runs 5 s later, so that no server outlives its sandbox."""
    pid = sandbox.server_pid()
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _ended(pid, STOP_TIMEOUT):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _ended(pid, STOP_TIMEOUT)


def _ended(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "no log"
