"""`contrast coordinator` and `contrast initializer`: the programs the container images run.

Both take their TEE from `--tee`: `hardware` inside a confidential VM, or `emulated-snp` /
`emulated-tdx` with the emulated TEE's state directory and the policy hash the (emulated)
hypervisor would put in HOST_DATA / MRCONFIGID.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Any

from contrast import logs
from contrast.atls.identity import TlsIdentity
from contrast.atls.issuers import TeeKind, make_issuer
from contrast.cli.errors import CannotListen, UsageError
from contrast.coordinator.core import Coordinator, utc_now
from contrast.coordinator.peers import DEFAULT_INTERVAL, PeerRecovery, PeerSources
from contrast.coordinator.server import CoordinatorServer, Ports
from contrast.coordinator.transit.server import TransitServer
from contrast.coordinator.workers import MeshWorkers, worker_config
from contrast.errors import ContrastError
from contrast.history.backends import HistoryBackend, open_store
from contrast.history.history import History
from contrast.initializer import cryptsetup
from contrast.initializer.client import obtain_mesh_certificate
from contrast.initializer.files import WORKLOAD_SECRET
from contrast.manifest.verifier import workload_verifier

log = logging.getLogger(__name__)


def register(commands: Any) -> None:
    coordinator = commands.add_parser(
        "coordinator", help="run the Coordinator (user API, mesh API, metrics)"
    )
    _tee_arguments(coordinator)
    coordinator.add_argument(
        "--history",
        type=HistoryBackend,
        choices=list(HistoryBackend),
        default=os.environ.get("CONTRAST_HISTORY", HistoryBackend.FILES.value),
        help="where the manifest history is kept: files in --state-dir, or ConfigMaps shared by"
        " all replicas (env CONTRAST_HISTORY; default: files)",
    )
    coordinator.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("CONTRAST_STATE_DIR", "/mnt/state")),
        help="files: where the manifest history is kept (a persistent volume in Kubernetes)",
    )
    coordinator.add_argument(
        "--namespace",
        help="configmaps: the namespace of the history (default: the Pod's own)",
    )
    coordinator.add_argument(
        "--kubeconfig",
        type=Path,
        help="configmaps: reach the Kubernetes API with this kubeconfig (default: in-cluster)",
    )
    coordinator.add_argument(
        "--peer", action="append", default=[], metavar="HOST:PORT",
        help="a peer replica's mesh API to recover the seed from after a restart (repeatable)",
    )  # fmt: skip
    coordinator.add_argument(
        "--peer-service", metavar="NAME[:PORT]",
        help="a DNS name whose A records are the ready peer replicas (the headless Service);"
        " port 7777 unless given",
    )  # fmt: skip
    coordinator.add_argument(
        "--peer-interval", type=float, default=DEFAULT_INTERVAL, metavar="SECONDS",
        help=f"how often to look for a ready peer while in recovery mode (default:"
        f" {DEFAULT_INTERVAL:.0f})",
    )  # fmt: skip
    coordinator.add_argument("--listen", default="0.0.0.0", help="address to listen on")  # noqa: S104
    coordinator.add_argument("--user-api-port", type=int, default=1313)
    coordinator.add_argument("--mesh-api-port", type=int, default=7777)
    coordinator.add_argument("--http-port", type=int, default=9102, help="metrics and probes")
    coordinator.add_argument(
        "--mesh-workers", type=int, default=int(os.environ.get("CONTRAST_MESH_WORKERS", "0")),
        metavar="N", help="N more processes serving the mesh API on its port once ready, for"
        " certificates on more cores (env CONTRAST_MESH_WORKERS; default: 0)",
    )  # fmt: skip
    coordinator.add_argument(
        "--transit-port", type=int, default=8200, help="the transit engine (Vault auto-unseal)"
    )
    coordinator.set_defaults(run=run_coordinator)

    initializer = commands.add_parser(
        "initializer", help="get this workload's mesh certificate and secret (init container)"
    )
    _tee_arguments(initializer)
    initializer.add_argument(
        "--coordinator",
        default=os.environ.get("COORDINATOR_HOST", "coordinator-ready"),
        metavar="HOST[:PORT]",
        help="the Coordinator's mesh API (env COORDINATOR_HOST)",
    )
    initializer.add_argument(
        "--output", type=Path, default=Path("/contrast"), help="directory for the files"
    )
    initializer.add_argument(
        "--deadline", type=float, help="give up after this many seconds (default: never)"
    )
    initializer.set_defaults(run=run_initializer)


def _tee_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=["json", "text"],
        default=os.environ.get("CONTRAST_LOG_FORMAT", "json"),
        help="log lines on stderr (env CONTRAST_LOG_FORMAT; default: json)",
    )
    parser.add_argument(
        "--tee",
        type=TeeKind,
        choices=list(TeeKind),
        default=TeeKind(os.environ.get("CONTRAST_TEE", TeeKind.HARDWARE.value)),
        help="where evidence comes from (env CONTRAST_TEE; default: hardware)",
    )
    parser.add_argument(
        "--tee-state",
        type=Path,
        default=_env_path("CONTRAST_TEE_STATE"),
        help="emulated TEE: its state directory (env CONTRAST_TEE_STATE)",
    )
    parser.add_argument(
        "--policy-hash",
        default=os.environ.get("CONTRAST_POLICY_HASH"),
        metavar="HEX",
        help="emulated TEE: this workload's policy hash (env CONTRAST_POLICY_HASH)",
    )


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _issuer(arguments: argparse.Namespace) -> Any:
    policy_hash = None
    if arguments.policy_hash:
        try:
            policy_hash = bytes.fromhex(arguments.policy_hash)
        except ValueError:
            raise UsageError(f"--policy-hash {arguments.policy_hash!r} is not hex") from None
    return make_issuer(arguments.tee, state_dir=arguments.tee_state, policy_hash=policy_hash)


def run_coordinator(arguments: argparse.Namespace) -> int:
    json_lines = arguments.log_format == "json"
    logs.configure(json_lines=json_lines)
    if json_lines:
        # gRPC core writes its own lines to stderr; the whole log must stay JSON lines.
        logs.capture_native_stderr("grpc.core")
    try:
        return _serve_coordinator(arguments)
    except ContrastError as error:
        if arguments.debug:
            raise
        log.error("the Coordinator cannot start: %s", error.explain())
        return 1


def _serve_coordinator(arguments: argparse.Namespace) -> int:
    issuer = _issuer(arguments)
    store = open_store(
        arguments.history,
        state_dir=arguments.state_dir,
        namespace=arguments.namespace,
        kubeconfig=arguments.kubeconfig,
    )
    coordinator = Coordinator(History(store), verifier_for=workload_verifier)
    if arguments.peer_interval <= 0:
        raise UsageError("--peer-interval must be more than 0 seconds")
    peers = PeerRecovery(
        coordinator,
        issuer,
        PeerSources(tuple(arguments.peer), arguments.peer_service),
        now=utc_now,
        interval=arguments.peer_interval,
    )
    identity = TlsIdentity.generate(now=utc_now())
    server = CoordinatorServer(
        coordinator,
        issuer,
        identity,
        host=arguments.listen,
        ports=Ports(arguments.user_api_port, arguments.mesh_api_port, arguments.http_port),
        started=peers.first_attempt_done.is_set,
    )
    try:
        transit = TransitServer(
            coordinator.active_state, host=arguments.listen, port=arguments.transit_port
        )
    except OSError as error:
        raise CannotListen(f"cannot listen on port {arguments.transit_port}: {error}") from None
    workers = MeshWorkers(
        coordinator,
        identity,
        worker_config(arguments, server.ports.mesh_api),
        arguments.mesh_workers,
    )
    server.start()
    transit.start()
    workers.start()
    log.info(
        "Coordinator started in mode %r: user API %s, mesh API %s, HTTP %s, transit %s",
        str(coordinator.mode),
        *server.ports.__dict__.values(),
        transit.port,
    )
    peers.start()

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("stopping on signal %s", signum)
        peers.stop()
        transit.stop()
        workers.stop()
        server.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.wait()
    return 0


def run_initializer(arguments: argparse.Namespace) -> int:
    logs.configure(json_lines=arguments.log_format == "json")
    target = (
        arguments.coordinator if ":" in arguments.coordinator else (f"{arguments.coordinator}:7777")
    )
    files = obtain_mesh_certificate(target, _issuer(arguments), deadline=arguments.deadline)
    for path in files.write(arguments.output):
        log.info("wrote %s", path)
    device = os.environ.get(cryptsetup.DEVICE_ENV)
    if device:  # secure-pv: stay as the sidecar that holds the encrypted volume
        cryptsetup.serve(device, arguments.output / WORKLOAD_SECRET)
    return 0
