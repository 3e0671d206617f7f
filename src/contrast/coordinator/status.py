"""How every Coordinator RPC ends: each failure mapped to a gRPC status on purpose, in one place.

- request bytes that are not the method's protobuf message → INVALID_ARGUMENT;
- a `CoordinatorError` → its own status, with its one-line explanation;
- our own TEE could not produce evidence (`EvidenceUnavailable`) → UNAVAILABLE;
- any other `AttestationError` (evidence the caller sent is not evidence) → INVALID_ARGUMENT;
- anything else is a bug → INTERNAL, with an incident id and no detail for the caller, and one
  log line for the operator whose message names the cause (exception type and clipped message;
  exception messages carry no secrets, see contrast.logs), with the innermost frames in its
  JSON fields.

Refusals are logged at info, bugs at error, both through a `LogThrottle` keyed by method and
error, so an unauthenticated caller cannot flood the log: a key is written once a minute, at most
20 lines in a row and one per 3 s overall (contrast.logs), and every call is counted in
`grpc_server_handled_total` whether or not it was logged.

The mapping is a server interceptor, so it covers every unary method of every service the server
carries, including ones added later. Servicers raise; they never call `context.abort` themselves.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from contrast.attestation.errors import AttestationError, EvidenceUnavailable
from contrast.coordinator.errors import CoordinatorError, CoordinatorPackageError
from contrast.coordinator.metrics import CoordinatorMetrics
from contrast.logs import LogThrottle, clip, describe_exception

log = logging.getLogger(__name__)

# Characters of a refusal's message that are logged, and that the caller gets (gRPC carries the
# message in a trailer, whose size is limited; the messages may quote what the caller sent).
LOGGED_REFUSAL_LIMIT = 300
DETAILS_LIMIT = 1024


@dataclass(frozen=True)
class Refusal:
    code: grpc.StatusCode
    details: str


def refusal_for(error: Exception) -> Refusal | None:
    """The deliberate answer to an expected error; None when the error is a bug."""
    if isinstance(error, CoordinatorError):
        return Refusal(getattr(grpc.StatusCode, error.status.value), error.explain())
    if isinstance(error, EvidenceUnavailable):
        return Refusal(grpc.StatusCode.UNAVAILABLE, f"no evidence: {error.explain()}")
    if isinstance(error, AttestationError):
        return Refusal(grpc.StatusCode.INVALID_ARGUMENT, error.explain())
    return None


class RequestNotParsed(CoordinatorPackageError):
    """The request bytes are not the method's message (raised and answered inside the guard)."""


Behaviour = Callable[[Any, grpc.ServicerContext], Any]


class DeliberateStatus(grpc.ServerInterceptor):
    """Wraps every unary handler so that it parses its own request and maps every failure."""

    def __init__(self, metrics: CoordinatorMetrics, *, throttle: LogThrottle | None = None) -> None:
        self._metrics = metrics
        self._throttle = throttle if throttle is not None else LogThrottle()
        self._guarded: dict[str, tuple[grpc.RpcMethodHandler[Any, Any], Any]] = {}
        self._counters: dict[tuple[str, str, grpc.StatusCode], Any] = {}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # unknown method (UNIMPLEMENTED from gRPC) or a streaming one
        path = handler_call_details.method
        cached = self._guarded.get(path)
        if cached is not None and cached[0] is handler:
            return cached[1]
        guarded: grpc.RpcMethodHandler[bytes, Any] = grpc.unary_unary_rpc_method_handler(
            self._guard(path, handler.unary_unary, handler.request_deserializer),
            request_deserializer=None,  # the guard parses, so a bad message is answered here
            response_serializer=handler.response_serializer,
        )
        self._guarded[path] = (handler, guarded)
        return guarded

    def _guard(
        self,
        path: str,
        behaviour: Behaviour,
        deserializer: Callable[[bytes], Any] | None,
    ) -> Callable[[bytes, grpc.ServicerContext], Any]:
        service, _, method = path.lstrip("/").rpartition("/")

        def guarded(raw: bytes, context: grpc.ServicerContext) -> Any:
            try:
                request = _parse(raw, deserializer)
                response = behaviour(request, context)
            except Exception as error:  # mapping every error is this class's job
                refusal = self._answer(service, method, error)
                context.abort(refusal.code, clip(refusal.details, DETAILS_LIMIT))
            self._count(service, method, grpc.StatusCode.OK)
            return response

        return guarded

    def _answer(self, service: str, method: str, error: Exception) -> Refusal:
        if isinstance(error, RequestNotParsed):
            refusal: Refusal | None = Refusal(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        else:
            refusal = refusal_for(error)
        if refusal is None:
            refusal = self._internal(method, error)
        else:
            self._log_refusal(method, refusal, error)
        self._count(service, method, refusal.code)
        return refusal

    def _log_refusal(self, method: str, refusal: Refusal, error: Exception) -> None:
        message = clip(refusal.details, LOGGED_REFUSAL_LIMIT)
        admission = self._throttle.admit((method, refusal.code, type(error).__name__, message))
        if admission is None:
            return
        log.info(
            "%s refused (%s): %s",
            method,
            refusal.code.name,
            message,
            extra={"fields": {"method": method, "code": refusal.code.name, **admission.fields()}},
        )

    def _internal(self, method: str, error: Exception) -> Refusal:
        incident = secrets.token_hex(4)
        where = describe_exception(error)
        innermost = where["where"][-1] if where["where"] else ""
        admission = self._throttle.admit((method, type(error).__name__, innermost))
        if admission is not None:
            # The cause in the message too, not only in the JSON fields: a text log (and a
            # reader of `message` alone) showed an INTERNAL with nothing to look at.
            log.error(
                "%s failed with an internal error (incident %s): %s: %s",
                method,
                incident,
                where["type"],
                where["message"],
                extra={
                    "fields": {
                        "method": method,
                        "incident": incident,
                        "exception": where,
                        **admission.fields(),
                    }
                },
            )
        return Refusal(grpc.StatusCode.INTERNAL, f"internal error (incident {incident})")

    def _count(self, service: str, method: str, code: grpc.StatusCode) -> None:
        key = (service, method, code)
        counter = self._counters.get(key)
        if counter is None:  # prometheus' label lookup costs more than the increment
            counter = self._counters[key] = self._metrics.rpcs_handled.labels(
                grpc_type="unary", grpc_service=service, grpc_method=method, grpc_code=code.name
            )
        counter.inc()


def _parse(raw: bytes, deserializer: Callable[[bytes], Any] | None) -> Any:
    if deserializer is None:
        return raw
    try:
        return deserializer(raw)
    except Exception:  # whatever the parser raises, the bytes are not the message
        message_type = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
        name = message_type.full_name if message_type is not None else "request"
        raise RequestNotParsed(f"the request is not a {name} message") from None
