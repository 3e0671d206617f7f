"""Peer recovery: a replica in recovery mode gets the seed from a ready peer, attested both ways.

1. Read the stored head and its manifest, unverified (nothing else is known before the seed):
   the peers it may trust are the manifest's Coordinators on its reference values.
2. Per peer (`--peer HOST:PORT`, and every A record of the headless Service's name, which lists
   ready replicas only): GetNonce; a fresh X25519 key; our evidence over SHA-512(key ‖ nonce);
   MeshAPI.Recover with 32 fresh bytes of our own.
3. The peer checks our evidence against its active manifest (policy hash of a `coordinator`
   entry, reference values met, nonce used once) and answers with the handover sealed to our key
   and its own evidence over SHA-512(sealed answer ‖ our bytes): we check that against the
   stored manifest's Coordinators, then open it.
4. `Coordinator.recover` then checks the head's signature with the seed (a seed of another
   deployment, or a store rolled back under us, is refused there) and that the mesh CA key is
   the one sealed for that state, and leaves recovery mode with the peers' mesh CA.

As the original (research/contrast.md §4.7): one attempt at start-up, then one every
`interval` while in recovery mode; a replica that finds no ready peer waits for `contrast recover`
as before. A replica without a manifest keeps looking too: another replica may get the first one.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import grpc
from cryptography.hazmat.primitives.asymmetric import x25519

from contrast.api import meshapi_pb2
from contrast.api.convert import evidence_from_proto, evidence_to_proto
from contrast.api.services import MeshApiClient
from contrast.atls.client import fetch_certificate, pinned_channel, rpc_message
from contrast.atls.peer import Issuer
from contrast.atls.reportdata import NONCE_SIZE, public_key_der, report_data
from contrast.attestation.errors import AttestationError
from contrast.coordinator.core import Coordinator, Mode
from contrast.coordinator.errors import CoordinatorPackageError
from contrast.coordinator.handover import open_sealed
from contrast.errors import ContrastError
from contrast.logs import describe_exception
from contrast.manifest.verifier import coordinator_verifier

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 15.0  # the original's retry period
DEFAULT_TIMEOUT = 15.0
MESH_API_PORT = 7777


class PeerRecoveryFailed(CoordinatorPackageError):
    """This peer did not hand over the seed (unreachable, not ready, refused, or not attested)."""


@dataclass(frozen=True)
class PeerSources:
    """Where peers are: fixed addresses, and a DNS name whose A records are the ready replicas."""

    addresses: tuple[str, ...] = ()
    service: str | None = None  # NAME[:PORT], port 7777 by default

    def __bool__(self) -> bool:
        return bool(self.addresses) or self.service is not None

    def targets(self) -> list[str]:
        found = list(self.addresses)
        if self.service is not None:
            found += [t for t in resolve(self.service) if t not in found]
        return found


def resolve(service: str) -> list[str]:
    """`IP:PORT` for every IPv4 address of the name (none when it does not resolve, yet)."""
    host, separator, port = service.rpartition(":")
    if not separator or not port.isdigit():
        host, port = service, str(MESH_API_PORT)
    try:
        answers = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        log.debug("no peers under %s: %s", host, error)
        return []
    addresses = dict.fromkeys(str(answer[4][0]) for answer in answers)
    return [f"{address}:{port}" for address in addresses]


def recover_from(
    target: str,
    coordinator: Coordinator,
    issuer: Issuer,
    *,
    now: Callable[[], datetime],
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Steps 1 to 4 of the module docstring with the peer at `target`."""
    stored = coordinator.stored_manifest_unverified()
    if stored is None:
        raise PeerRecoveryFailed("there is no stored history to recover")
    _, manifest = stored
    peers = [bytes.fromhex(h) for h in manifest.coordinator_policy_hashes]
    verifier = coordinator_verifier(manifest, peers)
    key = x25519.X25519PrivateKey.generate()
    public_key = public_key_der(key.public_key())
    ours = secrets.token_bytes(NONCE_SIZE)
    channel = pinned_channel(target, fetch_certificate(target, timeout=timeout))
    try:
        client = MeshApiClient(channel, timeout=timeout)
        nonce = client.get_nonce()
        evidence = issuer.issue(report_data(public_key, nonce))
        response = client.recover(
            meshapi_pb2.RecoverRequest(
                Nonce=nonce,
                PublicKey=public_key,
                Evidence=evidence_to_proto(evidence),
                RequesterNonce=ours,
            )
        )
    except grpc.RpcError as error:
        raise PeerRecoveryFailed(f"{target}: {rpc_message(error)}") from None
    finally:
        channel.close()
    try:
        verifier.verify(
            evidence_from_proto(response.Evidence),
            report_data=report_data(response.Sealed, ours),
            now=now(),
        )
    except AttestationError as error:
        raise PeerRecoveryFailed(
            f"{target} is not a Coordinator of the stored manifest ({error.reason}):"
            f" {error.explain()}"
        ) from None
    handover = open_sealed(response.Sealed, key, nonce)
    coordinator.recover(
        handover.seed,
        handover.salt,
        expected_transition_hash=handover.transition_hash,
        mesh_ca_key=handover.mesh_ca_key,
    )


class PeerRecovery:
    """The loop: try every peer at start-up, then every `interval` while in recovery mode."""

    def __init__(
        self,
        coordinator: Coordinator,
        issuer: Issuer,
        sources: PeerSources,
        *,
        now: Callable[[], datetime],
        interval: float = DEFAULT_INTERVAL,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._coordinator = coordinator
        self._issuer = issuer
        self._sources = sources
        self._now = now
        self._interval = interval
        self._timeout = timeout
        self._stop = threading.Event()
        # The start-up probe waits for this (as the original's: one attempt has finished).
        self.first_attempt_done = threading.Event()
        if not sources:
            self.first_attempt_done.set()

    def attempt(self) -> bool:
        """One round over the peers; whether this replica left recovery mode through one."""
        if self._coordinator.mode is not Mode.RECOVERY:
            return False
        targets = self._sources.targets()
        for target in targets:
            try:
                recover_from(
                    target, self._coordinator, self._issuer, now=self._now, timeout=self._timeout
                )
            except ContrastError as error:
                log.info("peer recovery from %s failed: %s", target, error.explain())
                continue
            except Exception as error:  # a bug must not end the loop that waits for peers
                log.warning(
                    "peer recovery from %s failed unexpectedly",
                    target,
                    extra={"fields": {"exception": describe_exception(error)}},
                )
                continue
            log.info("recovered from the peer Coordinator at %s", target)
            return True
        if not targets:
            log.info("peer recovery: no peer found; waiting for one, or for contrast recover")
        return False

    def _run(self) -> None:
        try:
            self.attempt()
        finally:
            self.first_attempt_done.set()
        while not self._stop.wait(self._interval):
            self.attempt()

    def start(self) -> None:
        if self._sources:
            threading.Thread(target=self._run, name="peer-recovery", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
