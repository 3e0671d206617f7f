"""The ConfigMap history when the API server fails: the faults a real one cannot be asked for.

A server error is a `HistoryError` naming the entry and the status (the Coordinator program stops
at start with that one line: `tests/coordinator/test_history_flags.py`); an API server that never
answers is the same kind of error after the call's deadline, never a hang.
"""

from __future__ import annotations

import time

import pytest

from contrast.history import configmaps
from contrast.history.configmaps import ConfigMapStore, core_api
from contrast.history.errors import HistoryError
from tests.kube.fakeapi import SILENT, failing


@pytest.mark.parametrize(
    ("status", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable")]
)
def test_a_server_error_names_the_entry_and_the_status(status: int, reason: str) -> None:
    with failing(status, reason) as server:
        store = ConfigMapStore(core_api(host=server.host), "ns")
        with pytest.raises(HistoryError, match=f"failed on transitions/latest \\({status} "):
            store.get("transitions/latest")
        with pytest.raises(HistoryError, match=f"failed on manifests/ab \\({status} "):
            store.put("manifests/ab", b"value")
    assert ("GET", "/api/v1/namespaces/ns/configmaps/contrast-store-transitions-latest") in (
        server.requests
    )


def test_an_api_server_that_never_answers_is_an_error_after_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(configmaps, "API_TIMEOUT", 0.5)
    with failing(SILENT) as server:
        store = ConfigMapStore(core_api(host=server.host), "ns")
        started = time.monotonic()
        with pytest.raises(HistoryError, match="cannot reach the Kubernetes API for"):
            store.compare_and_swap("transitions/latest", None, b"head")
        elapsed = time.monotonic() - started
    assert server.requests  # it was asked, and kept silent
    assert elapsed < 10 * 0.5, elapsed  # the client's retries included, bounded by the deadline


def test_the_servers_message_is_quoted_on_one_bounded_line() -> None:
    """What the server says is quoted (it names what was refused), but a long or multi-line
    body cannot flood the one-line error."""
    with failing(500, "line\n" * 5000) as server:
        store = ConfigMapStore(core_api(host=server.host), "ns")
        with pytest.raises(HistoryError) as raised:
            store.get("transitions/latest")
    message = str(raised.value)
    assert "\n" not in message
    assert "injected fault: line line line" in message
    assert len(message) < configmaps.MESSAGE_LIMIT + 200, len(message)
