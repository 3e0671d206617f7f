"""What `generate` needs to know about an image: its digest, its config, its users and groups.

The config fields are the subset genpolicy reads (research/kata-agent-policy-inputs.md §4.5):
they decide a container's args, env, working directory, user and image volumes in the policy.
`/etc/passwd` and `/etc/group` are the files of the merged image filesystem (last layer wins,
whiteouts delete), kept as text because the policy resolves user names against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contrast.errors import ContrastError


class ImageError(ContrastError):
    """An image that cannot be resolved, fetched or read."""


def _strings(value: Any, field: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ImageError(f"image config field {field} is not a list of strings")
    return tuple(value)


@dataclass(frozen=True)
class ImageConfig:
    """The `config` object of an OCI / Docker image config, as far as policies depend on it.

    `entrypoint` and `cmd` keep the difference between absent (None) and empty, because
    Kubernetes' `command`/`args` rules treat them differently.
    """

    user: str = ""
    env: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    working_dir: str = ""
    tty: bool = False
    volumes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, config: Mapping[str, Any] | None) -> ImageConfig:
        """From the `config` object of an image config blob (absent fields take defaults)."""
        if config is None:
            return cls()
        if not isinstance(config, Mapping):
            raise ImageError("the image config's `config` is not an object")
        volumes = config.get("Volumes") or {}
        if not isinstance(volumes, Mapping):
            raise ImageError("image config field Volumes is not an object")
        return cls(
            user=str(config.get("User") or ""),
            env=_strings(config.get("Env"), "Env") or (),
            entrypoint=_strings(config.get("Entrypoint"), "Entrypoint"),
            cmd=_strings(config.get("Cmd"), "Cmd"),
            working_dir=str(config.get("WorkingDir") or ""),
            tty=bool(config.get("Tty") or False),
            volumes=tuple(sorted(volumes)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "User": self.user,
            "Env": list(self.env),
            "Entrypoint": None if self.entrypoint is None else list(self.entrypoint),
            "Cmd": None if self.cmd is None else list(self.cmd),
            "WorkingDir": self.working_dir,
            "Tty": self.tty,
            "Volumes": {volume: {} for volume in self.volumes} or None,
        }


@dataclass(frozen=True)
class ImageFacts:
    """One image as a policy sees it.

    `reference` is the string as written in the YAML; `digest` the manifest digest it resolved
    to (`sha256:…`), so that the YAML can be pinned to exactly what the policy describes.
    `compressed_size` and `uncompressed_size` sum the layers, for the memory checks.
    """

    reference: str
    digest: str
    config: ImageConfig
    etc_passwd: str = ""
    etc_group: str = ""
    compressed_size: int = 0
    uncompressed_size: int = 0
