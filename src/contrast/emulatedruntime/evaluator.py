"""One pod's policy kept compiled between runc calls, in its TEE server's process.

Each runc call that is an agent request starts a new interpreter; loading the pod's policy there
(regorus parsing tens of KiB of Rego, then reading `AllowRequestsFailingPolicy`) cost more than
evaluating the request. The pod's TEE server lives as long as its sandbox, so it compiles the
policy once, in the background as it starts, and answers evaluations on a socket of its own in
the sandbox's directory: root's, mode 0600, never mounted into the pod (only `tee/` is).

What is evaluated does not move: the runc call holds the sandbox's lock, reads the policy state
from the sandbox's records, sends it with the request, and saves the state that comes back, as
it does when it evaluates itself. The server sets the compiled policy's data to the state it was
sent and reads `AllowRequestsFailingPolicy` again, which is what loading the policy with that
state does, so each answer is the one a fresh load would give. If the server cannot answer (not
started yet, killed, the policy failed to load, a request the engine raises on) the call
evaluates in its own process, with the same code and the same errors.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contrast.policy.engine import AgentPolicy

SOCKET_NAME = "policy.sock"
MAX_MESSAGE = 64 << 20  # requests are KiBs and the state grows by one entry per container
TIMEOUT = 10.0


class _Unanswered(Exception):
    """The server gave no answer; the caller evaluates itself."""


def ask(
    sandbox_directory: Path, data: Mapping[str, Any] | None, kind: str, request: Mapping[str, Any]
) -> tuple[bool, str, tuple[str, ...], dict[str, Any]] | None:
    """(allowed, kind, prints, data after) from the pod's server, or None if it did not answer."""
    try:
        answer = _exchange(
            sandbox_directory, {"data": data, "kind": kind, "request": dict(request)}
        )
        if answer.get("ok") is not True:
            return None
        allowed, name, prints, after = (
            answer["allowed"],
            answer["kind"],
            answer["prints"],
            answer["data"],
        )
        if not isinstance(allowed, bool) or not isinstance(name, str):
            return None
        if not isinstance(prints, list) or not isinstance(after, dict):
            return None
        return allowed, name, tuple(str(line) for line in prints), after
    except (OSError, ValueError, KeyError, _Unanswered):
        return None


def _exchange(sandbox_directory: Path, message: Mapping[str, Any]) -> dict[str, Any]:
    # Reached through the directory's descriptor: a sandbox's full path (64-digit ids below the
    # state directory) can be longer than a socket address may be.
    directory = os.open(sandbox_directory, os.O_PATH | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(TIMEOUT)
            connection.connect(f"/proc/self/fd/{directory}/{SOCKET_NAME}")
            connection.sendall(json.dumps(message).encode())
            connection.shutdown(socket.SHUT_WR)
            answer = json.loads(_read_all(connection))
    finally:
        os.close(directory)
    if not isinstance(answer, dict):
        raise _Unanswered
    return answer


def _read_all(connection: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := connection.recv(1 << 16):
        size += len(chunk)
        if size > MAX_MESSAGE:
            raise _Unanswered
        chunks.append(chunk)
    return b"".join(chunks)


class PolicyServer:
    """The compiled policy of one pod and the socket it answers on (in the TEE server).

    regorus's engine may be used only on the thread that made it, so one worker thread compiles
    the policy and then evaluates every request, one at a time, in the order they come.
    """

    def __init__(self, policy_text: str) -> None:
        self._text = policy_text
        self._requests: queue.Queue[tuple[dict[str, Any], queue.Queue[dict[str, Any]]]] = (
            queue.Queue()
        )

    def start(self, sandbox_directory: Path) -> None:
        """Compile in the background and listen on the sandbox's policy socket."""
        threading.Thread(target=self._work, daemon=True).start()
        path = sandbox_directory / SOCKET_NAME
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        directory = os.open(sandbox_directory, os.O_PATH | os.O_DIRECTORY)
        try:
            old = os.umask(0o177)  # created 0600: root's alone, before anyone could connect
            try:
                listener.bind(f"/proc/self/fd/{directory}/{SOCKET_NAME}")
            finally:
                os.umask(old)
        finally:
            os.close(directory)
        listener.listen(16)
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _work(self) -> None:
        from contrast.policy.engine import AgentPolicy  # noqa: PLC0415

        policy: AgentPolicy | None = None
        # Anything the engine raises (pyo3's panics are BaseExceptions) means no answer: the
        # runc call then evaluates itself and meets the error there.
        with contextlib.suppress(BaseException):
            policy = AgentPolicy(self._text)
        while True:
            message, reply = self._requests.get()
            answer: dict[str, Any] = {"ok": False}
            if policy is not None:
                with contextlib.suppress(BaseException):
                    policy.replace_data(message.get("data"))
                    decision = policy.evaluate(message["kind"], message["request"])
                    answer = {
                        "ok": True,
                        "allowed": decision.allowed,
                        "kind": decision.kind,
                        "prints": list(decision.prints),
                        "data": policy.data,
                    }
            reply.put(answer)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            connection, _ = listener.accept()
            threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            connection.settimeout(TIMEOUT)
            try:
                answer = self.answer(json.loads(_read_all(connection)))
            except (ValueError, _Unanswered):
                answer = {"ok": False}
            connection.sendall(json.dumps(answer).encode())

    def answer(self, message: Any) -> dict[str, Any]:
        """The decision on one request with the state it was sent, or {"ok": false}."""
        if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
            return {"ok": False}
        request, data = message.get("request"), message.get("data")
        if not isinstance(request, dict) or not (data is None or isinstance(data, dict)):
            return {"ok": False}
        reply: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=1)
        self._requests.put((message, reply))
        try:
            return reply.get(timeout=TIMEOUT)
        except queue.Empty:
            return {"ok": False}
