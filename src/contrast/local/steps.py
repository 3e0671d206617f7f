"""The demos' numbered steps: one line each, what happened and how long it took."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from contrast.errors import ContrastError
from contrast.local.errors import LocalError


class DemoFailed(LocalError):
    """A step of a demo did not do what it should."""


@dataclass
class Steps:
    say: Callable[[str], None] = print
    number: int = 0

    @contextmanager
    def step(self, description: str) -> Iterator[list[str]]:
        """`[ n] ✔ description: details (t s)` once the block ends; a ContrastError inside it
        stops the demo as DemoFailed naming the step. The block fills in the details."""
        self.number += 1
        started = time.monotonic()
        details: list[str] = []
        try:
            yield details
        except ContrastError as error:
            message = f"step {self.number} ({description}) failed: {error.explain()}"
            raise DemoFailed(message) from None
        took = time.monotonic() - started
        suffix = f": {'; '.join(details)}" if details else ""
        self.say(f"[{self.number:2}] ✔ {description}{suffix} ({took:.1f} s)")
