"""The Initializer's exchange with the Coordinator's mesh API.

Like the original, the Initializer does not attest the Coordinator: it only proves itself. What
it gets is useless to anyone else, since the certificate is for a key that never leaves this TEE,
and the workload secret is only released to attested evidence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.api import meshapi_pb2
from contrast.api.convert import evidence_to_proto
from contrast.api.services import MeshApiClient
from contrast.atls.client import (
    PIN_ATTEMPTS,
    ConnectionFailed,
    fetch_certificate,
    pinned_channel,
    rpc_message,
)
from contrast.atls.peer import Issuer
from contrast.atls.reportdata import public_key_der, report_data
from contrast.initializer.errors import InitializerError
from contrast.initializer.files import WorkloadFiles

log = logging.getLogger(__name__)

# Answers that mean "not yet": the Coordinator is starting, has no manifest, or is recovering.
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION}


@dataclass(frozen=True)
class Backoff:
    initial: float = 0.5
    maximum: float = 5.0

    def delays(self) -> Callable[[], float]:
        delay = self.initial

        def next_delay() -> float:
            nonlocal delay
            current, delay = delay, min(delay * 2, self.maximum)
            return current

        return next_delay


def request_mesh_certificate(
    target: str, issuer: Issuer, key: ec.EllipticCurvePrivateKey, *, timeout: float = 30.0
) -> WorkloadFiles:
    """One attempt: nonce, evidence for our key, NewMeshCert, on one pinned connection.

    Behind the `coordinator-ready` Service the certificate is fetched on one TCP connection and
    pinned on the next, which may reach another replica with a key of its own: its handshake
    fails (UNAVAILABLE before any answer). Nothing was sent yet, so the fetch and pin are tried
    again at once, as the CLI does (`atls.client`), instead of waiting out a backoff each time
    (with three replicas two attempts in three failed so). The nonce and the certificate request
    go over the same connection, so to the replica that issued the nonce.
    """
    for attempt in range(1, PIN_ATTEMPTS + 1):
        channel = pinned_channel(target, fetch_certificate(target, timeout=timeout))
        try:
            client = MeshApiClient(channel, timeout=timeout)
            try:
                nonce = client.get_nonce()
            except grpc.RpcError as error:
                if error.code() is grpc.StatusCode.UNAVAILABLE and attempt < PIN_ATTEMPTS:
                    continue
                raise
            public_key = public_key_der(key.public_key())
            evidence = issuer.issue(report_data(public_key, nonce))
            response = client.new_mesh_cert(
                meshapi_pb2.NewMeshCertRequest(
                    Nonce=nonce, PublicKey=public_key, Evidence=evidence_to_proto(evidence)
                )
            )
        finally:
            channel.close()
        return WorkloadFiles(
            mesh_ca=response.MeshCACert,
            cert_chain=response.CertChain,
            root_ca=response.RootCACert,
            key=key,
            workload_secret=response.WorkloadSecret or None,
        )
    raise AssertionError("unreachable: the last attempt returns or raises")


def obtain_mesh_certificate(
    target: str,
    issuer: Issuer,
    *,
    backoff: Backoff = Backoff(),
    deadline: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> WorkloadFiles:
    """Retry until the Coordinator issues a certificate, refuses for good, or `deadline` passes."""
    key = ec.generate_private_key(ec.SECP256R1())
    next_delay = backoff.delays()
    started = time.monotonic()
    while True:
        try:
            return request_mesh_certificate(target, issuer, key)
        except grpc.RpcError as error:
            code = error.code() if callable(getattr(error, "code", None)) else None
            if code not in RETRYABLE:
                raise InitializerError(
                    f"the Coordinator refused a mesh certificate: {rpc_message(error)}"
                ) from None
            reason = rpc_message(error)
        except ConnectionFailed as error:
            reason = error.message
        if deadline is not None and time.monotonic() - started > deadline:
            raise InitializerError(f"gave up after {deadline:.0f} s: {reason}")
        delay = next_delay()
        log.warning("waiting for the Coordinator (%s); retrying in %.1f s", reason, delay)
        sleep(delay)
