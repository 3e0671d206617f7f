"""Images built in Python for the tests: tar layers, configs, manifests, indexes, OCI layouts.

Everything is real content in the formats the OCI image spec and Docker schema 2 define, so the
same bytes can be pushed to a real registry or written into an OCI layout directory.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contrast.images.manifest import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    OCI_MANIFEST,
    REF_NAME_ANNOTATION,
)

OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


@dataclass(frozen=True)
class Entry:
    """One tar entry: a file (content), a directory, a symlink or a hard link."""

    name: str
    content: bytes = b""
    kind: bytes = tarfile.REGTYPE
    linkname: str = ""


def file(name: str, content: str | bytes) -> Entry:
    return Entry(name, content.encode() if isinstance(content, str) else content)


def directory(name: str) -> Entry:
    return Entry(name, kind=tarfile.DIRTYPE)


def symlink(name: str, target: str) -> Entry:
    return Entry(name, kind=tarfile.SYMTYPE, linkname=target)


def hardlink(name: str, target: str) -> Entry:
    return Entry(name, kind=tarfile.LNKTYPE, linkname=target)


def tar_bytes(entries: list[Entry]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.type = entry.kind
            info.linkname = entry.linkname
            info.mode = 0o755 if entry.kind == tarfile.DIRTYPE else 0o644
            if entry.kind == tarfile.REGTYPE:
                info.size = len(entry.content)
                tar.addfile(info, io.BytesIO(entry.content))
            else:
                tar.addfile(info)
    return buffer.getvalue()


@dataclass(frozen=True)
class Blob:
    data: bytes
    media_type: str

    @property
    def digest(self) -> str:
        return sha256(self.data)

    def descriptor(self, **extra: Any) -> dict[str, Any]:
        return {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": len(self.data),
            **extra,
        }


@dataclass(frozen=True)
class Layer:
    blob: Blob
    diff_id: str
    uncompressed_size: int


def layer(entries: list[Entry], *, compress: bool = True, docker: bool = False) -> Layer:
    tar = tar_bytes(entries)
    if compress:
        data = gzip.compress(tar, compresslevel=1, mtime=0)
        media_type = DOCKER_LAYER_GZIP if docker else OCI_LAYER_GZIP
    else:
        data, media_type = tar, OCI_LAYER_TAR
    return Layer(Blob(data, media_type), sha256(tar), len(tar))


@dataclass(frozen=True)
class Image:
    """A single-platform image: manifest, config and layers."""

    manifest: Blob
    config: Blob
    layers: tuple[Layer, ...]

    @property
    def blobs(self) -> list[Blob]:
        return [self.config, *(layer.blob for layer in self.layers)]

    @property
    def digest(self) -> str:
        return self.manifest.digest


def image(
    layers: list[Layer],
    config: dict[str, Any] | None = None,
    *,
    docker: bool = False,
    architecture: str = "amd64",
    diff_ids: list[str] | None = None,
) -> Image:
    config_document = {
        "architecture": architecture,
        "os": "linux",
        "config": config or {},
        "rootfs": {
            "type": "layers",
            "diff_ids": diff_ids if diff_ids is not None else [lay.diff_id for lay in layers],
        },
    }
    config_blob = Blob(
        json.dumps(config_document).encode(), DOCKER_CONFIG if docker else OCI_CONFIG
    )
    media_type = DOCKER_MANIFEST if docker else OCI_MANIFEST
    manifest = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "config": config_blob.descriptor(),
        "layers": [lay.blob.descriptor() for lay in layers],
    }
    return Image(Blob(json.dumps(manifest).encode(), media_type), config_blob, tuple(layers))


@dataclass(frozen=True)
class ImageIndex:
    """A multi-platform index (OCI) or manifest list (Docker) over several images."""

    manifest: Blob
    images: tuple[tuple[str, Image], ...] = field(default=())

    @property
    def digest(self) -> str:
        return self.manifest.digest


def index(platforms: list[tuple[str, Image]], *, docker: bool = False) -> ImageIndex:
    media_type = DOCKER_MANIFEST_LIST if docker else OCI_INDEX
    entries = []
    for platform, member in platforms:
        operating_system, architecture = platform.split("/")
        entries.append(
            member.manifest.descriptor(
                platform={"os": operating_system, "architecture": architecture}
            )
        )
    document = {"schemaVersion": 2, "mediaType": media_type, "manifests": entries}
    return ImageIndex(Blob(json.dumps(document).encode(), media_type), tuple(platforms))


def write_layout(path: Path, entries: list[tuple[Image | ImageIndex, str | None]]) -> None:
    """An OCI image layout with these images, each optionally named by a ref.name annotation."""
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(blob: Blob) -> None:
        (blobs / blob.digest.removeprefix("sha256:")).write_bytes(blob.data)

    manifests = []
    for item, name in entries:
        members = [member for _, member in item.images] if isinstance(item, ImageIndex) else [item]
        for member in members:
            for blob in member.blobs:
                put(blob)
            put(member.manifest)
        put(item.manifest)
        annotations = {REF_NAME_ANNOTATION: name} if name else {}
        manifests.append(item.manifest.descriptor(annotations=annotations))
    (path / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    document = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    (path / "index.json").write_text(json.dumps(document))
