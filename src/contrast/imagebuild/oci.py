"""An OCI image layout (image-spec image-layout.md) holding the release images.

Configs carry no build time (`created` is SOURCE_DATE_EPOCH) and no builder details, so they are
as reproducible as the layers; each image's index entry is named by its full tag reference
(`ghcr.io/contrast-python/coordinator:0.1.0`) in `org.opencontainers.image.ref.name`, which
`skopeo copy oci:DIR:REFERENCE` and `generate --oci-layout DIR` both find.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contrast.files import write_atomically
from contrast.imagebuild.layer import Layer
from contrast.imagebuild.spec import ImageSpec
from contrast.images.manifest import OCI_INDEX, OCI_MANIFEST, REF_NAME_ANNOTATION
from contrast.kuberesource.releaseimages import tagged

CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


def _canonical(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class BuiltImage:
    name: str
    digest: str
    size: int  # the sum of the compressed layers, config and manifest


class LayoutWriter:
    """Writes blobs once each and remembers the images for `index.json`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        (path / "blobs/sha256").mkdir(parents=True, exist_ok=True)
        self.images: list[tuple[str, dict[str, Any]]] = []

    def blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self.path / "blobs/sha256" / digest
        if not target.exists():
            write_atomically(target, data)
        return f"sha256:{digest}"

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
        config_data = _canonical(config)
        for layer in layers:
            self.blob(layer.blob)
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
        manifest_data = _canonical(manifest)
        digest = self.blob(manifest_data)
        descriptor = {
            "mediaType": OCI_MANIFEST,
            "digest": digest,
            "size": len(manifest_data),
            "annotations": {REF_NAME_ANNOTATION: tagged(spec.name)},
            "platform": {"architecture": "amd64", "os": "linux"},
        }
        self.images.append((spec.name, descriptor))
        size = sum(layer.size for layer in layers) + len(config_data) + len(manifest_data)
        return BuiltImage(spec.name, digest, size)

    def finish(self) -> None:
        index = {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [descriptor for _, descriptor in sorted(self.images)],
        }
        write_atomically(self.path / "oci-layout", _canonical({"imageLayoutVersion": "1.0.0"}))
        write_atomically(self.path / "index.json", _canonical(index))
