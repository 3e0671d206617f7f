"""The file-system steps a test's code takes, in order, from one audit hook.

Crash-safety tests check order (every write synced before the rename that publishes it, the
head renamed last), which no final state shows. An audit hook sees each `open`, `os.rename` and
`syncfs` call as it happens. Hooks cannot be removed, so one hook per process serves every test
and records only while a test's `recording()` is active.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

from contrast import syncfs

Event = tuple[str, str]
Classify = Callable[[str, tuple[object, ...]], Event | None]

_ACTIVE: list[tuple[Classify, list[Event]]] = []
_HOOKED: list[bool] = []  # [True] once the process has the hook


def opens(event: str, arguments: tuple[object, ...]) -> Event | None:
    """("open", path) for every open by path, ("rename", target), ("syncfs", "")."""
    if event == "os.rename":
        return ("rename", str(arguments[1]))
    if event == "open" and isinstance(arguments[0], str):
        return ("open", arguments[0])
    if event == syncfs.AUDIT_EVENT:
        return ("syncfs", "")
    return None


def writes(event: str, arguments: tuple[object, ...]) -> Event | None:
    """As `opens`, but only files opened for writing by `open()`, as ("write", path)."""
    if event == "open":
        written = isinstance(arguments[0], str) and arguments[1] not in (None, "r")
        return ("write", str(arguments[0])) if written else None
    return opens(event, arguments)


def _hook(event: str, arguments: tuple[object, ...]) -> None:
    if not _ACTIVE:
        return
    classify, recorded = _ACTIVE[-1]
    step = classify(event, arguments)
    if step is not None:
        recorded.append(step)


def recording(classify: Classify = opens) -> Iterator[list[Event]]:
    """A fixture body: yields the list the steps are appended to while the test runs."""
    if not _HOOKED:
        sys.addaudithook(_hook)
        _HOOKED.append(True)
    recorded: list[Event] = []
    entry = (classify, recorded)
    _ACTIVE.append(entry)
    try:
        yield recorded
    finally:
        _ACTIVE.remove(entry)
