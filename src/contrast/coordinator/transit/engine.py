"""What the transit engine answers, independent of HTTP and TLS: route, authorise, encrypt, decrypt.

Authorisation is the original's: the caller's mesh certificate carries its workload secret ID
(the extension `contrast.ca.authority.WORKLOAD_SECRET_ID_OID`), and the key name in the path must
equal it. Beyond the original, every request (not only the handshake) checks that the certificate
comes from the active manifest's mesh CA, so a kept-alive connection does not outlive a manifest
update that removed its workload.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from contrast.ca.authority import WORKLOAD_SECRET_ID_OID
from contrast.coordinator.core import State
from contrast.coordinator.errors import CoordinatorError
from contrast.coordinator.transit.cipher import TransitKey
from contrast.coordinator.transit.errors import (
    Forbidden,
    NotServing,
    UnsupportedMethod,
    UnsupportedPath,
)
from contrast.coordinator.transit.requests import parse_decrypt, parse_encrypt

log = logging.getLogger(__name__)

MOUNT = "/v1/transit/"
OPERATIONS = ("encrypt", "decrypt")
# Vault's client writes with PUT, most others (hvac, curl -d) with POST; Vault takes both.
WRITE_METHODS = ("PUT", "POST")
# The longest key name looked at: workload secret IDs are Kubernetes names, far shorter.
NAME_LIMIT = 1024


@dataclass(frozen=True)
class Route:
    operation: str
    name: str


def route(method: str, path: str) -> Route:
    """The operation and key name of `path`; refuses every other Vault path by name."""
    path = path.split("?", 1)[0]
    if not path.startswith(MOUNT):
        raise UnsupportedPath(
            f"{path[:128]!r} is not served: the Coordinator serves {MOUNT}encrypt/<key> and"
            f' {MOUNT}decrypt/<key> only (mount_path "transit/")'
        )
    operation, _, name = path[len(MOUNT) :].partition("/")
    if operation not in OPERATIONS:
        raise UnsupportedPath(
            f"transit {operation[:64]!r} is not served: the Coordinator's keys are derived from"
            " its seed, so there is nothing to create, read, rotate or export; it serves encrypt"
            " and decrypt"
        )
    # Workload secret IDs may hold slashes (the default is the resource's qualified name), which
    # Vault's client puts into the path unescaped: the key name is the whole rest of it.
    name = unquote(name)
    if not name:
        raise UnsupportedPath(f"{MOUNT}{operation}/ needs a key name (the workload secret ID)")
    if method not in WRITE_METHODS:
        raise UnsupportedMethod(f"{MOUNT}{operation} takes {' or '.join(WRITE_METHODS)}")
    return Route(operation, name)


def workload_secret_id(certificate: x509.Certificate) -> str | None:
    """The workload secret ID of a mesh certificate (DER OCTET STRING), None if it has none."""
    try:
        extension = certificate.extensions.get_extension_for_oid(WORKLOAD_SECRET_ID_OID)
    except x509.ExtensionNotFound:
        return None
    value = extension.value
    if not isinstance(value, x509.UnrecognizedExtension):
        return None
    content = _octet_string(value.value)
    try:
        return content.decode() if content is not None else None
    except UnicodeDecodeError:
        return None


def _octet_string(der: bytes) -> bytes | None:
    if len(der) < 2 or der[0] != 0x04:
        return None
    length, start = der[1], 2
    if length & 0x80:
        size = length & 0x7F
        if size == 0 or size > 4 or len(der) < 2 + size:
            return None
        length, start = int.from_bytes(der[2 : 2 + size], "big"), 2 + size
    if len(der) != start + length:
        return None
    return der[start:]


class TransitEngine:
    """Answers transit requests from the Coordinator's active state, read afresh for each."""

    def __init__(self, active_state: Callable[[], State]) -> None:
        self._active_state = active_state

    def state(self) -> State:
        """The state keys come from; NotServing (503) without one, with the Coordinator's reason."""
        try:
            return self._active_state()
        except CoordinatorError as error:
            raise NotServing(error.message, hint=error.hint) from None

    def handle(
        self, method: str, path: str, peer: x509.Certificate | None, body: bytes
    ) -> dict[str, Any]:
        """The `data` of Vault's answer; raises a TransitError for every refusal."""
        state = self.state()
        request = route(method, path)
        self.authorize(state, peer, request.name)
        if request.operation == "encrypt":
            return self._encrypt(state, request.name, body)
        return self._decrypt(state, request.name, body)

    def authorize(self, state: State, peer: x509.Certificate | None, name: str) -> None:
        if peer is None:
            raise Forbidden(
                "permission denied: no client certificate",
                hint="present the workload's mesh certificate (tls_client_cert certChain.pem,"
                " tls_client_key key.pem); reconnect if the connection predates the manifest",
            )
        try:
            peer.verify_directly_issued_by(state.authority.mesh_ca)
        except (ValueError, TypeError, InvalidSignature):
            raise Forbidden(
                "permission denied: the client certificate is not from the active manifest's"
                " mesh CA",
                hint="restart the workload to get a certificate of the current manifest",
            ) from None
        own = workload_secret_id(peer)
        if own is None:
            raise Forbidden(
                "permission denied: the client certificate carries no workload secret ID",
                hint="give the workload's manifest entry a WorkloadSecretID",
            )
        if own != name:
            raise Forbidden(
                f"permission denied: key {name[:NAME_LIMIT]!r} is not this workload's; it may use"
                f" only the key named by its workload secret ID, {own!r}",
                hint="set key_name in the seal stanza to the workload secret ID",
            )

    def _encrypt(self, state: State, name: str, body: bytes) -> dict[str, Any]:
        request = parse_encrypt(body)
        key = TransitKey.derive(state.seed, name, request.key_version)
        ciphertext = key.encrypt(request.plaintext, request.associated_data)
        log.debug("transit: encrypted for %r with key version %d", name, key.version)
        return {"ciphertext": ciphertext.to_text(), "key_version": key.version}

    def _decrypt(self, state: State, name: str, body: bytes) -> dict[str, Any]:
        request = parse_decrypt(body)
        key = TransitKey.derive(state.seed, name, request.ciphertext.version)
        plaintext = key.decrypt(request.ciphertext, request.associated_data)
        log.debug("transit: decrypted for %r with key version %d", name, key.version)
        return {"plaintext": base64.b64encode(plaintext).decode()}
