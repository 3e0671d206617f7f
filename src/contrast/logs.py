"""Log output of the long-running programs: one JSON object per line, for log collectors.

With `configure(json_lines=True)` every record that reaches Python's logging (ours, gRPC's and
other libraries', warnings, uncaught exceptions in threads) is written as one JSON object on one
line. An exception is rendered as a bounded object (type, message, innermost frames), never as a
multi-line traceback, so no caller can make a line grow without bound. `capture_native_stderr`
extends this to what native code (gRPC core) writes straight to file descriptor 2.

Messages are written by the components; none of them carries key material or secrets (seeds,
workload secrets and private keys never go through a log call).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

# Characters of a message kept in one line, and of an exception's message within it.
MESSAGE_LIMIT = 4096
EXCEPTION_MESSAGE_LIMIT = 200
# The innermost frames of an exception that are logged: enough to find the bug.
FRAME_LIMIT = 8


def clip(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def describe_exception(error: BaseException) -> dict[str, Any]:
    """An exception as one bounded JSON value: type, clipped message, innermost frames."""
    frames = traceback.extract_tb(error.__traceback__)[-FRAME_LIMIT:]
    return {
        "type": type(error).__name__,
        "message": clip(str(error), EXCEPTION_MESSAGE_LIMIT),
        "where": [f"{_short_path(f.filename)}:{f.lineno} in {f.name}" for f in frames],
    }


def _short_path(filename: str) -> str:
    # From the package root on: `contrast/coordinator/core.py`, `grpc/_server.py`.
    for marker in ("/site-packages/", "/src/"):
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    return filename


class JsonFormatter(logging.Formatter):
    """One JSON object per record; `extra={"fields": {...}}` adds structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": clip(record.getMessage(), MESSAGE_LIMIT),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update((key, value) for key, value in fields.items() if key not in entry)
        if record.exc_info and record.exc_info[1] is not None:
            entry["exception"] = describe_exception(record.exc_info[1])
        return json.dumps(entry, default=str)


def configure(
    *, json_lines: bool, level: int = logging.INFO, stream: IO[str] | None = None
) -> None:
    """Send every logger to `stream` (stderr), as JSON lines or as plain text.

    The `contrast` loggers log at `level`; other libraries' loggers at WARNING and above. In JSON
    mode warnings and uncaught exceptions in threads go the same way, so the program's whole
    stderr stays one JSON object per line.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(
        JsonFormatter() if json_lines else logging.Formatter("%(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    ours = logging.getLogger("contrast")
    ours.handlers.clear()
    ours.setLevel(level)
    ours.propagate = True
    if json_lines:
        logging.captureWarnings(True)
        threading.excepthook = _log_thread_exception


def _log_thread_exception(arguments: threading.ExceptHookArgs) -> None:
    if arguments.exc_value is None or isinstance(arguments.exc_value, SystemExit):
        return
    thread = arguments.thread.name if arguments.thread is not None else "?"
    logging.getLogger("contrast").error(
        "uncaught exception in thread %s",
        thread,
        exc_info=(arguments.exc_type, arguments.exc_value, arguments.exc_traceback),
    )


# Native code's own log lines look like `I1125 02:33:37.000489 7172 file.cc:2563] text` (absl).
_NATIVE_LEVELS = {
    "I": logging.INFO,
    "W": logging.WARNING,
    "E": logging.ERROR,
    "F": logging.CRITICAL,
}


def capture_native_stderr(logger_name: str = "native") -> None:
    """Route what native code writes to file descriptor 2 through logging, one record a line.

    gRPC core logs straight to fd 2 in its own format, bypassing Python. After this call fd 2 is
    a pipe read by a daemon thread that turns each line into a (throttled) record of
    `logger_name`; Python's own handlers keep writing to the original stderr. Only for programs
    that own their process (`contrast coordinator`), never for a library caller.
    """
    original = os.dup(2)
    reader, writer = os.pipe()
    os.dup2(writer, 2)
    os.close(writer)
    sys.stderr = os.fdopen(original, "w", buffering=1, encoding="utf-8", errors="replace")
    root = logging.getLogger()
    for handler in root.handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.stderr)
    logger = logging.getLogger(logger_name)
    throttle = LogThrottle()

    def pump() -> None:
        with os.fdopen(reader, "rb") as lines:
            for raw in lines:
                text = raw.decode("utf-8", "replace").rstrip("\n")
                if not text.strip():
                    continue
                level = _NATIVE_LEVELS.get(text[:1], logging.WARNING)
                # Lines differ in time and thread id; the source location after them is the key.
                key = text.split("]", 1)[0].split(" ")[-1] if "]" in text else text[:80]
                admission = throttle.admit(key)
                if admission is not None:
                    logger.log(level, "%s", text, extra={"fields": admission.fields()})

    threading.Thread(target=pump, name="native-stderr", daemon=True).start()


@dataclass(frozen=True)
class Admission:
    """A line may be written; it reports what was held back since the last one."""

    repeats: int  # lines with the same key held back since the last of them was written
    dropped: int  # lines of any key held back by the overall budget since the last line

    def fields(self) -> dict[str, int]:
        return {
            name: value
            for name, value in (("repeats", self.repeats), ("dropped", self.dropped))
            if value
        }


# Decisions (issue 11): a key is written once per WINDOW; at most BURST lines in a row and one
# per REFILL seconds after that overall; at most MAX_KEYS keys are remembered.
WINDOW = 60.0
BURST = 20
REFILL = 3.0
MAX_KEYS = 1024


class LogThrottle:
    """Decides which of many similar log lines to write, so no caller can flood the log.

    A key (say, the RPC method and the error) is written at its first occurrence; repeats within
    `window` seconds are only counted, and the count goes out with the next line for that key. On
    top, a token bucket holds all keys to `burst` lines in a row and one line per `refill`
    seconds after that; lines it holds back are counted and reported with the next line written.
    Nothing is lost silently: every held-back line is in some later line's counts (or in the
    caller's metrics).
    """

    def __init__(
        self,
        *,
        window: float = WINDOW,
        burst: int = BURST,
        refill: float = REFILL,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window
        self._burst = burst
        self._refill = refill
        self._max_keys = max_keys
        self._clock = clock
        self._tokens = float(burst)
        self._refilled_at = clock()
        # key → (when it was last written, repeats held back since)
        self._keys: OrderedDict[Hashable, tuple[float, int]] = OrderedDict()
        self._dropped = 0
        self._lock = threading.Lock()

    def admit(self, key: Hashable) -> Admission | None:
        """An `Admission` if a line for `key` may be written now, else None (it was counted)."""
        with self._lock:
            now = self._clock()
            seen = self._keys.get(key)
            if seen is not None and now - seen[0] < self._window:
                self._keys[key] = (seen[0], seen[1] + 1)
                return None
            self._tokens = min(self._burst, self._tokens + (now - self._refilled_at) / self._refill)
            self._refilled_at = now
            if self._tokens < 1:
                self._dropped += 1
                return None
            self._tokens -= 1
            admission = Admission(seen[1] if seen is not None else 0, self._dropped)
            self._dropped = 0
            self._keys[key] = (now, 0)
            self._keys.move_to_end(key)
            while len(self._keys) > self._max_keys:
                _, (_, repeats) = self._keys.popitem(last=False)
                self._dropped += repeats
            return admission
