"""An OCI image layout (image-spec image-layout.md) holding the release images.

Configs carry no build time (`created` is SOURCE_DATE_EPOCH) and no builder details, so they are
as reproducible as the layers; each image's index entry is named by its full tag reference
(`ghcr.io/contrast-python/coordinator:0.1.0`) in `org.opencontainers.image.ref.name`, which
`skopeo copy oci:DIR:REFERENCE` and `generate --oci-layout DIR` both find.

Layers are written straight into the blobs directory as they are made (`LayoutWriter.layer`), so
an image of any size is built in little memory; a blob goes in under its digest only when whole. A
layer of another layout (`Layer.path`) is copied in when an image names it, checked on the way.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from contrast.files import TEMPORARY_SUFFIX, sync_directory, write_atomically
from contrast.imagebuild.layer import CHUNK, Entry, Layer, write_layer
from contrast.imagebuild.lock import BuildError
from contrast.imagebuild.spec import ImageSpec
from contrast.images.manifest import OCI_INDEX, OCI_MANIFEST, REF_NAME_ANNOTATION
from contrast.kuberesource.releaseimages import tagged

CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


def canonical_json(document: Mapping[str, Any]) -> bytes:
    """The bytes of a layout's JSON documents: sorted keys, no spaces, so digests are stable."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class BuiltImage:
    name: str
    digest: str
    size: int  # the sum of the compressed layers, config and manifest


@dataclass
class _Staged:
    """A blob being written: its file, and its digest once known."""

    file: BinaryIO
    digest: str = ""


class LayoutWriter:
    """Writes blobs once each and remembers the images for `index.json`.

    `oci-layout` is written first, so a build that fails half way leaves a layout (without an
    index of its own, or with the one it had), which the next build may write into again.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.blobs = path / "blobs/sha256"
        self.blobs.mkdir(parents=True, exist_ok=True)
        if not (path / "oci-layout").exists():
            write_atomically(path / "oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"}))
        self.images: list[tuple[str, dict[str, Any]]] = []

    def blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self.blobs / digest
        if not target.exists():
            write_atomically(target, data)
        return f"sha256:{digest}"

    def layer(self, entries: Iterable[Entry], epoch: int) -> Layer:
        """Write the layer of `entries` (`layer.write_layer`) into the blobs as it is made."""
        with self._new_blob() as staged:
            layer = write_layer(entries, epoch, staged.file)
            staged.digest = layer.digest
        return replace(layer, path=self._path(layer.digest))

    def image(self, spec: ImageSpec, layers: Sequence[Layer], *, epoch: int) -> BuiltImage:
        created = datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        config = {
            "architecture": "amd64",
            "os": "linux",
            "created": created,
            "config": {
                "User": spec.user,
                "Env": list(spec.env),
                "Entrypoint": list(spec.entrypoint),
                "Cmd": list(spec.cmd),
                "WorkingDir": spec.working_dir,
                "Labels": {"org.opencontainers.image.title": spec.name},
            },
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
            "history": [{"created": created, "created_by": "contrast-build-images"}] * len(layers),
        }
        config_data = canonical_json(config)
        for layer in layers:
            self._import(layer)
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": CONFIG_TYPE,
                "digest": self.blob(config_data),
                "size": len(config_data),
            },
            "layers": [
                {"mediaType": LAYER_TYPE, "digest": layer.digest, "size": layer.size}
                for layer in layers
            ],
        }
        manifest_data = canonical_json(manifest)
        digest = self.add_manifest(tagged(spec.name), manifest_data)
        size = sum(layer.size for layer in layers) + len(config_data) + len(manifest_data)
        return BuiltImage(spec.name, digest, size)

    def add_manifest(self, name: str, manifest: bytes) -> str:
        """Write `manifest` (an OCI image manifest for linux/amd64) and list it in the index
        under the reference `name`; its digest. The index lists its images sorted by name."""
        digest = self.blob(manifest)
        descriptor = {
            "mediaType": OCI_MANIFEST,
            "digest": digest,
            "size": len(manifest),
            "annotations": {REF_NAME_ANNOTATION: name},
            "platform": {"architecture": "amd64", "os": "linux"},
        }
        self.images.append((name, descriptor))
        return digest

    def import_blob(self, source: Path, digest: str, size: int) -> None:
        """Copy the blob `digest` of `size` bytes from `source`, hashed as it is copied: a file
        that does not hold it leaves nothing and is a BuildError. A blob the layout has is kept."""
        if self._path(digest).exists():
            return
        with self._new_blob() as staged, source.open("rb") as file:
            hasher = hashlib.sha256()
            copied = 0
            while chunk := file.read(CHUNK):
                hasher.update(chunk)
                copied += len(chunk)
                staged.file.write(chunk)
            if f"sha256:{hasher.hexdigest()}" != digest or copied != size:
                raise BuildError(f"{source} does not hold layer {digest}")
            staged.digest = digest

    def _path(self, digest: str) -> Path:
        return self.blobs / digest.removeprefix("sha256:")

    def _import(self, layer: Layer) -> None:
        """Copy a layer that another layout holds into this one, checked against its digest."""
        if self._path(layer.digest).exists():
            return
        if layer.path is None:
            raise BuildError(f"{self.path} lacks layer {layer.digest} and it is stored nowhere")
        self.import_blob(layer.path, layer.digest, layer.size)

    @contextmanager
    def _new_blob(self) -> Iterator[_Staged]:
        """A temporary file in the blobs, renamed to the digest the body sets once synced.

        As `write_atomically`, so a blob is never seen half written; a blob the layout has
        already is left as it is, and a body that fails leaves nothing.
        """
        descriptor, name = tempfile.mkstemp(
            dir=self.blobs, prefix=".blob.", suffix=TEMPORARY_SUFFIX
        )
        temporary = Path(name)
        try:
            os.fchmod(descriptor, 0o644)
            with os.fdopen(descriptor, "wb", buffering=CHUNK) as file:
                staged = _Staged(file)
                yield staged
                file.flush()
                os.fsync(file.fileno())
            if not staged.digest:
                raise BuildError(f"a blob of {self.path} was written without its digest")
            target = self._path(staged.digest)
            if target.exists():
                temporary.unlink()
            else:
                os.replace(temporary, target)
                sync_directory(self.blobs)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise

    def finish(self) -> None:
        index = {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [descriptor for _, descriptor in sorted(self.images)],
        }
        write_atomically(self.path / "index.json", canonical_json(index))
