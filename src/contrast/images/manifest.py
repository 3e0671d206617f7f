"""Manifests, indexes and configs as the OCI image spec and Docker's schema 2 define them.

Only what resolution needs is parsed: descriptors (media type, digest, size, platform,
annotations), the layers and config of an image manifest, the diff_ids of a config. Pulls are for
linux/amd64, the only platform confidential containers run on (genpolicy fixes the same platform).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contrast.images.model import ImageConfig, ImageError
from contrast.images.reference import is_sha256_digest

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_SCHEMA1 = (
    "application/vnd.docker.distribution.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
)
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
# Sent as Accept, so registries serve multi-arch images as indexes rather than down-converting.
ACCEPTED_MANIFEST_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST, OCI_MANIFEST, DOCKER_MANIFEST)

REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
PLATFORM_OS = "linux"
PLATFORM_ARCHITECTURE = "amd64"
# Manifests and configs are small; a bound stops a hostile server from feeding memory forever.
MAX_DOCUMENT_SIZE = 8 * 1024 * 1024


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor: what a blob is, its digest and its size."""

    media_type: str
    digest: str
    size: int
    platform_os: str = ""
    platform_architecture: str = ""
    annotations: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_json(cls, value: Any, where: str) -> Descriptor:
        if not isinstance(value, Mapping):
            raise ImageError(f"{where}: a descriptor is not an object")
        digest = value.get("digest")
        size = value.get("size")
        if not isinstance(digest, str) or not is_sha256_digest(digest):
            raise ImageError(f"{where}: descriptor digest {digest!r} is not a sha256 digest")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ImageError(f"{where}: descriptor {digest} has an invalid size {size!r}")
        platform = value.get("platform") or {}
        annotations = value.get("annotations") or {}
        if not isinstance(platform, Mapping) or not isinstance(annotations, Mapping):
            raise ImageError(f"{where}: descriptor {digest} has a malformed platform/annotations")
        return cls(
            media_type=str(value.get("mediaType") or ""),
            digest=digest,
            size=size,
            platform_os=str(platform.get("os") or ""),
            platform_architecture=str(platform.get("architecture") or ""),
            annotations=tuple(sorted((str(k), str(v)) for k, v in annotations.items())),
        )

    def annotation(self, key: str) -> str | None:
        return dict(self.annotations).get(key)


@dataclass(frozen=True)
class Index:
    """An OCI image index or Docker manifest list."""

    manifests: tuple[Descriptor, ...]

    def select_platform(self, where: str) -> Descriptor:
        """The linux/amd64 manifest; the first one if several match (as containerd does)."""
        for descriptor in self.manifests:
            if (
                descriptor.platform_os == PLATFORM_OS
                and descriptor.platform_architecture == PLATFORM_ARCHITECTURE
            ):
                return descriptor
        offered = sorted(
            {f"{d.platform_os or '?'}/{d.platform_architecture or '?'}" for d in self.manifests}
        )
        raise ImageError(
            f"{where} has no {PLATFORM_OS}/{PLATFORM_ARCHITECTURE} image"
            f" (it offers {', '.join(offered) or 'nothing'})",
            hint="confidential containers run linux/amd64 images only",
        )


@dataclass(frozen=True)
class Manifest:
    """An OCI image manifest or Docker schema 2 manifest: one config and its layers."""

    config: Descriptor
    layers: tuple[Descriptor, ...]


@dataclass(frozen=True)
class ConfigBlob:
    """The parts of an image config blob resolution uses."""

    config: ImageConfig
    diff_ids: tuple[str, ...]

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> ConfigBlob:
        document = _load_json(data, f"{where} config")
        rootfs = document.get("rootfs") or {}
        diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, Mapping) else None
        if not isinstance(diff_ids, list) or not all(
            isinstance(item, str) and is_sha256_digest(item) for item in diff_ids
        ):
            raise ImageError(f"{where}: the config's rootfs.diff_ids are missing or malformed")
        return cls(config=ImageConfig.from_json(document.get("config")), diff_ids=tuple(diff_ids))


def parse_manifest(data: bytes, media_type: str, where: str) -> Index | Manifest:
    """Parse a manifest document; the media type from the document wins over the transport's."""
    document = _load_json(data, where)
    kind = str(document.get("mediaType") or media_type or "")
    if kind in DOCKER_SCHEMA1 or document.get("schemaVersion") == 1:
        raise ImageError(
            f"{where} is a Docker schema 1 manifest, which is not supported",
            hint="push the image again with a current Docker or buildah (schema 2 / OCI)",
        )
    if kind in INDEX_TYPES or (not kind and "manifests" in document):
        entries = document.get("manifests")
        if not isinstance(entries, list):
            raise ImageError(f"{where}: the index has no manifests list")
        return Index(tuple(Descriptor.from_json(entry, where) for entry in entries))
    if kind in MANIFEST_TYPES or (not kind and "layers" in document):
        layers = document.get("layers")
        if not isinstance(layers, list):
            raise ImageError(f"{where}: the manifest has no layers list")
        return Manifest(
            config=Descriptor.from_json(document.get("config"), where),
            layers=tuple(Descriptor.from_json(layer, where) for layer in layers),
        )
    raise ImageError(f"{where} has unsupported manifest media type {kind!r}")


def _load_json(data: bytes, where: str) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ImageError(f"{where} is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise ImageError(f"{where} is not a JSON object")
    return document
