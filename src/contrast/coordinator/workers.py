"""Worker processes that serve the mesh API on the Coordinator's own port, beside it.

One Python process issues certificates on one core: the interpreter lock holds every request's
parsing, checks and signing in turn. `contrast coordinator --mesh-workers N` starts N processes
more, once the Coordinator is ready, that each serve the mesh API (GetNonce, NewMeshCert and the
peers' Recover) on the same address: gRPC sets SO_REUSEPORT, so the kernel spreads the incoming
connections over every process listening there. The user API (SetManifest, GetManifests,
Recover) and the HTTP endpoint stay with the Coordinator process alone.

A worker is a replica of the Coordinator in the sense of the HA design (README, "Several
Coordinator replicas and peer recovery"), so it keeps the same invariants the same way:

- it opens the same history and answers from it: before every certificate it reads the head and
  follows a newer one, checked against its seed (`Coordinator._follow`), so no worker certifies
  against a manifest the Coordinator has superseded;
- it never sets a manifest (it has no user API), so SetManifest has one writer per pod and the
  history's compare-and-swap its one winner among replicas, as before;
- it leaves recovery mode only through `Coordinator.recover`, with the seed the Coordinator
  hands it: the head must verify with that seed and contain the transition handed over.

The Coordinator hands a worker its seed, salt, head transition and TLS identity through the
worker's stdin, a pipe between two processes of the same TEE (nothing leaves the confidential
VM, nothing is logged). Every process serves the same TLS identity, since a client pins the
certificate it fetched on one connection and may reach another process on the next. The pipe
also bounds a worker's life: when the Coordinator exits, however it exits, the pipe closes and the
worker stops. A worker that exits on its own is started again.

The worker's stdout, a pipe the other way, carries its counters: one line once it serves, then
its counters' values (`WorkerReport`) every REPORT_INTERVAL while they change, and once more
when it stops. The Coordinator adds what each grew by to its own counters, so the pod's one
/metrics (the Coordinator's, port 9102) counts every process's certificates, refusals and RPCs,
at most REPORT_INTERVAL behind; a worker killed outright takes its last interval's counts with
it. Why not prometheus_client's multiprocess mode: it is switched on for the whole interpreter by
an environment variable before the import, keeps its values in files under a directory the pod
must provide and clean, and gives up the per-Coordinator registries the tests run side by side;
the pipe is already there and is the worker's lifetime.

A nonce is remembered by the process that issued it; gRPC sends a channel's calls over one
connection, so the Initializer's GetNonce and NewMeshCert reach the same process (a call on a
new connection may reach another and be refused, and the Initializer retries, as it does with
several replicas).

Run by the Coordinator: `python -m contrast.coordinator.workers` (its configuration and then its
handover, one JSON line each, on stdin).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from contrast.atls.identity import TlsIdentity
from contrast.coordinator.core import Coordinator, Mode
from contrast.coordinator.errors import CoordinatorPackageError, InvalidOption
from contrast.coordinator.metrics import CoordinatorMetrics, CounterKey
from contrast.errors import ContrastError
from contrast.logs import clip

# By name: run as `python -m`, this module's __name__ is __main__, outside the contrast loggers.
log = logging.getLogger("contrast.coordinator.workers")

# How often the Coordinator looks whether it became ready, and the longest a worker that keeps
# exiting waits before its next start.
READY_INTERVAL = 0.5
MAX_BACKOFF = 30.0
# How often a worker reports its counters to the Coordinator, while they change.
REPORT_INTERVAL = 1.0


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs to open the Coordinator's history and TEE and share its port."""

    history: str  # a HistoryBackend value
    state_dir: str
    namespace: str | None
    kubeconfig: str | None
    tee: str  # a TeeKind value
    tee_state: str | None
    policy_hash: str | None  # hex, for an emulated TEE
    host: str
    mesh_port: int
    json_lines: bool

    def to_line(self) -> bytes:
        return json.dumps(asdict(self)).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> WorkerConfig:
        return cls(**json.loads(line))


@dataclass(frozen=True)
class WorkerHandover:
    """The Coordinator's seed and head, and the TLS identity every process serves."""

    seed: bytes = field(repr=False)
    salt: bytes = field(repr=False)
    transition_hash: bytes
    tls_key_pem: bytes = field(repr=False)
    tls_certificate_pem: bytes

    def to_line(self) -> bytes:
        return json.dumps({name: value.hex() for name, value in asdict(self).items()}).encode() + (
            b"\n"
        )

    @classmethod
    def from_line(cls, line: bytes) -> WorkerHandover:
        fields = json.loads(line)
        return cls(**{name: bytes.fromhex(value) for name, value in fields.items()})


@dataclass(frozen=True)
class WorkerReport:
    """A worker's counters, each value since it started (so a lost line loses nothing)."""

    counts: tuple[tuple[CounterKey, float], ...]

    def to_line(self) -> bytes:
        counts = [
            [name, [list(pair) for pair in labels], value] for (name, labels), value in self.counts
        ]
        return json.dumps(counts).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> WorkerReport:
        """The report in `line`; ValueError if it is not one."""
        entries = json.loads(line)  # JSON's and UTF-8's errors are ValueErrors
        if not isinstance(entries, list):
            raise ValueError("a report is a list of counters")
        counts: list[tuple[CounterKey, float]] = []
        for entry in entries:
            match entry:
                case [str() as name, list() as labels, int() | float() as value] if not isinstance(
                    value, bool
                ) and all(_is_label(pair) for pair in labels):
                    counts.append(((name, tuple((a, b) for a, b in labels)), float(value)))
                case _:
                    raise ValueError(f"not a counter's value: {clip(repr(entry), 100)}")
        return cls(tuple(counts))


def _is_label(pair: object) -> bool:
    match pair:
        case [str(), str()]:
            return True
    return False


def worker_config(arguments: argparse.Namespace, mesh_port: int) -> WorkerConfig:
    """The workers' configuration from `contrast coordinator`'s arguments and its mesh port."""
    if arguments.mesh_workers < 0:
        raise InvalidOption("--mesh-workers must be 0 or more")
    return WorkerConfig(
        history=str(arguments.history.value),
        state_dir=str(arguments.state_dir),
        namespace=arguments.namespace,
        kubeconfig=str(arguments.kubeconfig) if arguments.kubeconfig else None,
        tee=str(arguments.tee.value),
        tee_state=str(arguments.tee_state) if arguments.tee_state else None,
        policy_hash=arguments.policy_hash,
        host=arguments.listen,
        mesh_port=mesh_port,
        json_lines=arguments.log_format == "json",
    )


class WorkerFailed(CoordinatorPackageError):
    """A mesh API worker could not take over the Coordinator's state or its port."""


class MeshWorkers:
    """`count` worker processes, started once the Coordinator is ready and kept running."""

    def __init__(
        self,
        coordinator: Coordinator,
        identity: TlsIdentity,
        config: WorkerConfig,
        count: int,
        *,
        stderr: IO[Any] | None = None,
    ) -> None:
        """`stderr`: where the workers write their log (default: this process's stderr)."""
        self._coordinator = coordinator
        self._identity = identity
        self._config = config
        self._count = count
        self._stderr = stderr
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._processes: list[subprocess.Popen[bytes]] = []
        self._serving = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for index in range(self._count):
            thread = threading.Thread(
                target=self._keep_running, args=(index,), name=f"mesh-worker-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def wait_serving(self, timeout: float, count: int | None = None) -> bool:
        """True once `count` (default: every) worker started since the last call said it serves
        (for tests and benches)."""
        wanted = self._count if count is None else count
        return all(self._serving.acquire(timeout=timeout) for _ in range(wanted))

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [process.pid for process in self._processes if process.poll() is None]

    def stop(self, timeout: float = 5.0) -> None:
        """Close every worker's pipe (it stops serving and exits); kill one that does not."""
        self._stopping.set()
        with self._lock:
            processes = list(self._processes)
        for process in processes:
            _close(process)
        for process in processes:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for thread in self._threads:
            thread.join(timeout)

    def _keep_running(self, index: int) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            handover = self._wait_ready()
            if handover is None:
                return
            process = self._spawn(handover)
            if process is None:
                return
            serving = process.stdout is not None and process.stdout.readline() == b"serving\n"
            if serving:
                self._serving.release()
                backoff = 1.0
                self._take_reports(index, process)
            process.wait()
            with self._lock:
                self._processes.remove(process)
            if self._stopping.is_set():
                return
            log.warning(
                "mesh API worker %d exited with %s; starting it again in %.0f s",
                index,
                process.returncode,
                backoff,
            )
            if self._stopping.wait(backoff):
                return
            backoff = min(backoff * 2, MAX_BACKOFF)

    def _take_reports(self, index: int, process: subprocess.Popen[bytes]) -> None:
        """Add what the worker's counters grew by to the Coordinator's, until its stdout closes."""
        assert process.stdout is not None
        metrics = self._coordinator.metrics
        reported: dict[CounterKey, float] = {}  # this process's last values; it starts from 0
        for line in process.stdout:
            try:
                report = WorkerReport.from_line(line)
            except ValueError as error:
                log.warning("mesh API worker %d sent a line that is not a report: %s", index, error)
                continue
            for key, value in report.counts:
                grown = value - reported.get(key, 0.0)
                if grown <= 0:
                    continue
                try:
                    metrics.add(key, grown)
                except KeyError as error:
                    log.warning("mesh API worker %d reported %s", index, error)
                    continue
                reported[key] = value

    def _wait_ready(self) -> WorkerHandover | None:
        """The handover of the Coordinator's state once it is ready; None when stopping."""
        while not self._stopping.is_set():
            if self._coordinator.mode is Mode.READY:
                try:
                    state = self._coordinator.active_state()
                except ContrastError as error:
                    log.warning("cannot hand the state to a mesh API worker: %s", error.explain())
                else:
                    return WorkerHandover(
                        state.seed.seed,
                        state.seed.salt,
                        state.latest.transition_hash,
                        self._identity.key_pem,
                        self._identity.certificate_pem,
                    )
            self._stopping.wait(READY_INTERVAL)
        return None

    def _spawn(self, handover: WorkerHandover) -> subprocess.Popen[bytes] | None:
        with self._lock:
            if self._stopping.is_set():
                return None
            process = subprocess.Popen(
                [sys.executable, "-m", "contrast.coordinator.workers"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr if self._stderr is not None else sys.stderr,
            )
            self._processes.append(process)
        assert process.stdin is not None
        try:
            process.stdin.write(self._config.to_line() + handover.to_line())
            process.stdin.flush()
        except OSError:
            pass  # it exited already; _keep_running sees that
        return process


def _close(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()


def serve_worker(config: WorkerConfig, handover: WorkerHandover, until: IO[bytes]) -> None:
    """Recover from the handover, serve the mesh API on the shared port until `until` closes."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509 import load_pem_x509_certificate  # noqa: PLC0415

    from contrast.atls.issuers import TeeKind, make_issuer  # noqa: PLC0415
    from contrast.coordinator.server import mesh_api_server  # noqa: PLC0415
    from contrast.history.backends import HistoryBackend, open_store  # noqa: PLC0415
    from contrast.history.history import History  # noqa: PLC0415
    from contrast.manifest.verifier import workload_verifier  # noqa: PLC0415

    store = open_store(
        HistoryBackend(config.history),
        state_dir=Path(config.state_dir),
        namespace=config.namespace,
        kubeconfig=Path(config.kubeconfig) if config.kubeconfig else None,
    )
    coordinator = Coordinator(History(store), verifier_for=workload_verifier)
    coordinator.recover(
        handover.seed, handover.salt, expected_transition_hash=handover.transition_hash
    )
    key = serialization.load_pem_private_key(handover.tls_key_pem, None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise WorkerFailed("the handed TLS key is not an ECDSA key")
    identity = TlsIdentity(key, load_pem_x509_certificate(handover.tls_certificate_pem))
    issuer = make_issuer(
        TeeKind(config.tee),
        state_dir=Path(config.tee_state) if config.tee_state else None,
        policy_hash=bytes.fromhex(config.policy_hash) if config.policy_hash else None,
    )
    server, _ = mesh_api_server(coordinator, issuer, identity, f"{config.host}:{config.mesh_port}")
    server.start()
    log.info("mesh API worker %d serving on port %d", os.getpid(), config.mesh_port)
    reports = _Reports(coordinator.metrics, sys.stdout.buffer)
    reports.write(b"serving\n")
    reporter = threading.Thread(target=reports.run, name="metrics-report", daemon=True)
    reporter.start()
    until.read()  # returns when the Coordinator closes the pipe or exits
    server.stop(2.0).wait()
    reports.stop()
    reporter.join()
    reports.report()  # the counts of the calls that ended while stopping


class _Reports:
    """A worker's side of the counters' pipe: a report every REPORT_INTERVAL while they change."""

    def __init__(self, metrics: CoordinatorMetrics, out: IO[bytes]) -> None:
        self._metrics = metrics
        self._out = out
        self._stopping = threading.Event()
        self._sent: dict[CounterKey, float] = {}

    def write(self, line: bytes) -> None:
        try:
            self._out.write(line)
            self._out.flush()
        except (BrokenPipeError, ValueError):  # the Coordinator is gone; stdin tells the worker
            self._stopping.set()

    def report(self) -> None:
        values = self._metrics.counter_values()
        if values != self._sent:
            self.write(WorkerReport(tuple(values.items())).to_line())
            self._sent = values

    def run(self) -> None:
        while not self._stopping.wait(REPORT_INTERVAL):
            self.report()

    def stop(self) -> None:
        self._stopping.set()


def main() -> int:
    from contrast import logs  # noqa: PLC0415

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the Coordinator stops its workers itself
    config = WorkerConfig.from_line(sys.stdin.buffer.readline())
    logs.configure(json_lines=config.json_lines)
    if config.json_lines:
        logs.capture_native_stderr("grpc.core")
    line = sys.stdin.buffer.readline()
    if not line:
        return 0  # the Coordinator stopped before it handed anything over
    try:
        serve_worker(config, WorkerHandover.from_line(line), sys.stdin.buffer)
    except ContrastError as error:
        log.error("the mesh API worker cannot serve: %s", error.explain())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
