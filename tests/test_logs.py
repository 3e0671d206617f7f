"""Log lines: one bounded JSON object each, and a throttle that no caller can flood past."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading

import pytest

from contrast.logs import FRAME_LIMIT, JsonFormatter, LogThrottle


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def recurse(depth: int) -> None:
    if depth == 0:
        raise ValueError("boom\nsecond line " + "x" * 10_000)
    recurse(depth - 1)


def test_an_exception_is_one_bounded_json_line() -> None:
    try:
        recurse(50)
    except ValueError:
        record = logging.LogRecord(
            "contrast.test", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info()
        )
    record.fields = {"method": "SetManifest", "message": "must not replace the message"}
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "failed here"
    assert entry["method"] == "SetManifest"
    assert entry["exception"]["type"] == "ValueError"
    assert len(entry["exception"]["message"]) < 300
    assert len(entry["exception"]["where"]) == FRAME_LIMIT
    assert entry["exception"]["where"][-1].endswith("in recurse")
    assert len(line) < 2000


def test_a_key_is_written_once_per_window_and_its_repeats_reported() -> None:
    clock = FakeClock()
    throttle = LogThrottle(window=60, burst=5, refill=3, clock=clock)
    first = throttle.admit("a")
    assert first is not None
    assert first.fields() == {}
    for _ in range(7):
        assert throttle.admit("a") is None
    assert throttle.admit("b") is not None  # another key is not held back
    clock.now += 60
    again = throttle.admit("a")
    assert again is not None
    assert again.fields() == {"repeats": 7}


def test_the_overall_budget_holds_many_keys_and_counts_what_it_drops() -> None:
    clock = FakeClock()
    throttle = LogThrottle(window=60, burst=20, refill=3, clock=clock)
    written = [throttle.admit(key) for key in range(100)]
    assert sum(admission is not None for admission in written) == 20
    clock.now += 3  # one more token
    admission = throttle.admit("late")
    assert admission is not None
    assert admission.fields() == {"dropped": 80}
    assert throttle.admit("later") is None


@pytest.mark.parametrize("max_keys", [1, 3])
def test_forgotten_keys_pass_their_repeats_on(max_keys: int) -> None:
    clock = FakeClock()
    throttle = LogThrottle(window=60, burst=100, refill=1, max_keys=max_keys, clock=clock)
    throttle.admit("a")
    throttle.admit("a")  # one repeat of "a", held back
    for key in range(max_keys):
        throttle.admit(key)  # pushes "a" out
    admission = throttle.admit("next")
    assert admission is not None
    assert admission.fields() == {"dropped": 1}


def test_json_mode_routes_library_and_warning_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from contrast import logs

    buffer = io.StringIO()
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(logging.getLogger("contrast"), "handlers", [])
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(root, "level", root.level)
    level, propagate = logging.getLogger("contrast").level, logging.getLogger("contrast").propagate
    try:
        logs.configure(json_lines=True, stream=buffer)
        logging.getLogger("grpc._server").error("from a library\nwith a second line")
        logging.getLogger("contrast.x").info("ours")
        logging.getLogger("grpc._server").info("below the libraries' level")
    finally:
        logging.captureWarnings(False)
        logging.getLogger("contrast").setLevel(level)
        logging.getLogger("contrast").propagate = propagate
    entries = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert [(e["logger"], e["message"]) for e in entries] == [
        ("grpc._server", "from a library\nwith a second line"),
        ("contrast.x", "ours"),
    ]
