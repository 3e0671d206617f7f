"""The root of every error the project raises on purpose.

Each component derives its own family from `ContrastError`, so the CLI can turn any expected
failure into one readable line (`str(error)`, plus the hint) and reserve tracebacks for bugs.
Messages name what was wrong and, where it helps, what to do; they never carry secrets.
"""

from __future__ import annotations


class ContrastError(Exception):
    """An expected failure that can explain itself to a user."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message

    def explain(self) -> str:
        """One line for a user: what went wrong and, if known, what to try."""
        return f"{self.message} ({self.hint})" if self.hint else self.message
