"""`images/lock.json`: every Debian package version and every wheel's sha256 the images contain.

The build installs exactly what the lock names and refuses anything else, so two builds from the
same commit take the same bytes. `contrast-build-images --relock` rewrites the lock: Debian
package versions as `mmdebstrap` resolves them on the mirror today, wheels as pip resolves the
requirement sets within the versions of the environment it runs in (the tested one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contrast.errors import ContrastError

LOCK_FORMAT = 1


class BuildError(ContrastError):
    """The images cannot be built as asked."""


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel: pip downloads it by name and version and checks its sha256."""

    name: str
    version: str
    filename: str
    sha256: str

    def requirement(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class Lock:
    """Debian package versions per package set; wheels per requirement set."""

    debian: Mapping[str, Mapping[str, str]]
    python: Mapping[str, tuple[Wheel, ...]]

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "images/lock.json") -> Lock:
        try:
            raw = json.loads(data)
            if raw.get("format") != LOCK_FORMAT:
                raise BuildError(f"{where}: format {raw.get('format')!r}, expected {LOCK_FORMAT}")
            debian = {
                name: {str(package): str(version) for package, version in packages.items()}
                for name, packages in raw["debian"].items()
            }
            python = {
                name: tuple(Wheel(**wheel) for wheel in wheels)
                for name, wheels in raw["python"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise BuildError(
                f"{where} cannot be read: {error}",
                hint="restore it from git or rewrite it with contrast-build-images --relock",
            ) from None
        return cls(debian=debian, python=python)

    @classmethod
    def from_file(cls, path: Path) -> Lock:
        try:
            data = path.read_bytes()
        except OSError as error:
            raise BuildError(
                f"{path} cannot be read: {error.strerror}",
                hint="write it with contrast-build-images --relock",
            ) from None
        return cls.from_bytes(data, str(path))

    def to_bytes(self) -> bytes:
        document: dict[str, Any] = {
            "format": LOCK_FORMAT,
            "debian": {name: dict(sorted(p.items())) for name, p in sorted(self.debian.items())},
            "python": {
                name: [wheel.__dict__ for wheel in sorted(wheels, key=lambda w: w.name)]
                for name, wheels in sorted(self.python.items())
            },
        }
        return json.dumps(document, indent=2).encode() + b"\n"
