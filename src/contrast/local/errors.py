"""The local runs' root error, under the project's: a container, a process or the demo failed."""

from __future__ import annotations

from contrast.errors import ContrastError


class LocalError(ContrastError):
    """A local run (the embedded Coordinator, a workload, the demo) that cannot go on."""
