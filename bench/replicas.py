"""Coordinator replicas of the local demo on loopback, for the benches that load or kill them."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contrast.local.demo import Demo


@contextmanager
def replicas_with_manifest(count: int) -> Iterator[Demo]:
    """`count` replicas started, the demo's manifest set, all ready; every process stopped after.

    Imported late: the benches' client processes run the same script and need none of this.
    """
    from contrast.client import operations  # noqa: PLC0415
    from contrast.client.workspace import Workspace  # noqa: PLC0415
    from contrast.local.demo import CLIENT, COORDINATOR, SERVER, Demo  # noqa: PLC0415
    from contrast.local.workspace import (  # noqa: PLC0415
        RESOURCES,
        emulated_reference_values,
        write_workspace,
    )

    with tempfile.TemporaryDirectory() as directory:
        demo = Demo(Path(directory), say=lambda _: None)
        try:
            values = emulated_reference_values(demo.tee, demo.state / "tee")
            write_workspace(demo.workdir, values, [COORDINATOR, SERVER, CLIENT])
            demo.start_coordinators(*range(count))
            operations.set_manifest(demo.target, Workspace(demo.workdir), demo.workdir / RESOURCES)
            demo.wait_ready(*range(count))
            yield demo
        finally:
            demo.processes.stop_all()
