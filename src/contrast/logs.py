"""Log output of the long-running programs: one JSON object per line, for log collectors.

Messages are written by the components; none of them carries key material or secrets (seeds,
workload secrets and private keys never go through a log call).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(*, json_lines: bool, level: int = logging.INFO) -> None:
    """Send the `contrast` loggers to stderr, as JSON lines or as plain text."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if json_lines else logging.Formatter("%(levelname)s %(name)s: %(message)s")
    )
    logger = logging.getLogger("contrast")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
