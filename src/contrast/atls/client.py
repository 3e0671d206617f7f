"""Connecting to the Coordinator so that only an attested Coordinator can answer.

1. Fetch the certificate the server presents (unverified; it is just a key so far).
2. Open a gRPC channel that accepts only that certificate (pinning).
3. Over it, ask for evidence of SHA-512(that key ‖ a fresh nonce) and verify it.

After step 3 every call on the channel goes to the TEE that holds the key, which the evidence
showed runs the expected Coordinator. A man in the middle fails at step 2 (wrong key) or step 3
(the TEE never vouches for its key).

Behind a Service of several replicas (the `coordinator` Service, reached through the
port-forwarder pod), steps 1 and 2 are two TCP connections that the Service may send to two
replicas, each with a key of its own: then step 2's handshake fails. Nothing was trusted yet, so
steps 1 and 2 are tried again, each time with a freshly fetched certificate, up to
`PIN_ATTEMPTS` times (with three replicas picked at random, 24 attempts all miss with
probability (2/3)^24 < 1e-4).
"""

from __future__ import annotations

import secrets
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import grpc
from cryptography import x509

from contrast.api import userapi_pb2
from contrast.api.convert import evidence_from_proto
from contrast.api.services import USER_API_MESSAGE_OPTIONS, UserApiClient
from contrast.atls.errors import AtlsError
from contrast.atls.identity import SERVER_NAME
from contrast.atls.peer import AttestedPeer, EvidenceVerifier
from contrast.atls.reportdata import NONCE_SIZE, public_key_der, report_data

DEFAULT_TIMEOUT = 30.0
PIN_ATTEMPTS = 24


class ConnectionFailed(AtlsError):
    """The Coordinator could not be reached or did not answer as a Coordinator."""


def split_target(target: str) -> tuple[str, int]:
    host, separator, port = target.rpartition(":")
    if not separator or not host or not port.isdigit():
        raise ConnectionFailed(f"{target!r} is not HOST:PORT", hint="for example -c 127.0.0.1:1313")
    return host.strip("[]"), int(port)


def fetch_certificate(target: str, *, timeout: float = DEFAULT_TIMEOUT) -> bytes:
    """The PEM certificate the server at `target` presents, not verified."""
    host, port = split_target(target)
    try:
        return ssl.get_server_certificate((host, port), timeout=timeout).encode()
    except (TimeoutError, OSError) as error:
        raise ConnectionFailed(
            f"cannot reach the Coordinator at {target}: {error}",
            hint="check the address and that the Coordinator is running",
        ) from None


def pinned_channel(
    target: str, certificate_pem: bytes, *, options: Sequence[tuple[str, int]] = ()
) -> grpc.Channel:
    """A channel that completes TLS only with the holder of `certificate_pem`'s key."""
    credentials = grpc.ssl_channel_credentials(root_certificates=certificate_pem)
    return grpc.secure_channel(
        target, credentials, options=[("grpc.ssl_target_name_override", SERVER_NAME), *options]
    )


@dataclass
class AttestedConnection:
    """A channel to an attested Coordinator and what its evidence said."""

    channel: grpc.Channel
    peer: AttestedPeer

    def close(self) -> None:
        self.channel.close()


def connect_attested(
    target: str,
    verifier: EvidenceVerifier,
    *,
    now: datetime,
    timeout: float = DEFAULT_TIMEOUT,
) -> AttestedConnection:
    """Connect to the Coordinator at `target` and attest it; see the module docstring."""
    for attempt in range(1, PIN_ATTEMPTS + 1):
        certificate_pem = fetch_certificate(target, timeout=timeout)
        key = x509.load_pem_x509_certificate(certificate_pem).public_key()
        channel = pinned_channel(target, certificate_pem, options=USER_API_MESSAGE_OPTIONS)
        nonce = secrets.token_bytes(NONCE_SIZE)
        try:
            response = UserApiClient(channel, timeout=timeout).attest(
                userapi_pb2.AttestRequest(Nonce=nonce)
            )
        except grpc.RpcError as error:
            channel.close()
            # UNAVAILABLE before any answer: the pinned connection met another replica (or none).
            if error.code() is grpc.StatusCode.UNAVAILABLE and attempt < PIN_ATTEMPTS:
                continue
            raise ConnectionFailed(
                f"the Coordinator at {target} did not attest: {rpc_message(error)}"
            ) from None
        try:
            evidence = evidence_from_proto(response.Evidence)
            peer = verifier.verify(
                evidence, report_data=report_data(public_key_der(key), nonce), now=now
            )
        except BaseException:
            channel.close()
            raise
        return AttestedConnection(channel, peer)
    raise AssertionError("unreachable: the last attempt returns or raises")


def rpc_message(error: grpc.RpcError) -> str:
    """`CODE: details` of a failed call, for one-line error messages."""
    code = getattr(error, "code", None)
    details = getattr(error, "details", None)
    name = code().name if callable(code) else "UNKNOWN"
    text = details() if callable(details) else str(error)
    return f"{name}: {text}"
