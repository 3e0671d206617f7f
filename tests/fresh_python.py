"""A fresh interpreter for tests about what a piece of code imports (this one has it all)."""

from __future__ import annotations

import subprocess
import sys


def printed_by(code: str) -> list[str]:
    """What a new Python process running `code` prints, split into words."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return result.stdout.split()
