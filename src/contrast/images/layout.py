"""Local OCI image layouts (OCI image spec, image-layout.md), for air-gapped `generate` runs.

A layout is a directory with `oci-layout`, `index.json` and content-addressed `blobs/sha256/…`
(what `skopeo copy … oci:DIR:TAG`, `crane` or `docker buildx --output type=oci` write). A reference
finds its entry in `index.json` by the `org.opencontainers.image.ref.name` annotation, written
either as a full reference (`registry/repo:tag`, normalised like any reference) or as the bare
tag, the form skopeo and buildx use. A bare tag says nothing about the repository, so a layout
holding several images should use full names. A pinned reference is found by its digest alone:
an index.json entry or any blob of the layout with that digest, since content addressing makes
the name irrelevant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import BinaryIO

from contrast.boundedfile import read_bounded
from contrast.images.manifest import (
    MAX_DOCUMENT_SIZE,
    REF_NAME_ANNOTATION,
    Descriptor,
    Index,
    parse_manifest,
)
from contrast.images.model import ImageError
from contrast.images.reference import ImageReference, ImageReferenceError

LAYOUT_FILE = "oci-layout"
INDEX_FILE = "index.json"
# `oci-layout` is `{"imageLayoutVersion": "1.0.0"}`; `index.json` is bounded like any manifest.
LAYOUT_FILE_MAX_BYTES = 64 << 10
_HINT = "--oci-layout takes a directory written by skopeo, crane or buildx"


class OciLayout:
    """One OCI image layout directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            marker_data = read_bounded(
                path / LAYOUT_FILE, LAYOUT_FILE_MAX_BYTES, what="the OCI layout file", hint=_HINT
            )
            marker = json.loads(marker_data)
            index_data = read_bounded(
                path / INDEX_FILE, MAX_DOCUMENT_SIZE, what="the OCI index", hint=_HINT
            )
        except FileNotFoundError as error:
            raise ImageError(
                f"{path} is not an OCI image layout: {Path(error.filename).name} is missing",
                hint=_HINT,
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ImageError(f"OCI layout {path}: {LAYOUT_FILE} cannot be read: {error}") from None
        if not isinstance(marker, dict) or "imageLayoutVersion" not in marker:
            raise ImageError(f"OCI layout {path}: {LAYOUT_FILE} has no imageLayoutVersion")
        index = parse_manifest(index_data, "", f"OCI layout {path} {INDEX_FILE}")
        if not isinstance(index, Index):
            raise ImageError(f"OCI layout {path}: {INDEX_FILE} is not an image index")
        self.entries = index.manifests

    def __str__(self) -> str:
        return f"OCI layout {self.path}"

    def find(self, reference: ImageReference) -> Descriptor | None:
        """The entry `reference` names in this layout, or None."""
        if reference.digest is not None:
            for entry in self.entries:
                if entry.digest == reference.digest:
                    return entry
            blob = self._blob_path(reference.digest)
            if blob.is_file():
                # A manifest inside an index, or an image whose entry lost its annotation.
                return Descriptor(media_type="", digest=reference.digest, size=blob.stat().st_size)
            return None
        named = [entry for entry in self.entries if _names(entry, reference)]
        for entry in named:
            if entry.platform_os in {"", "linux"} and entry.platform_architecture in {"", "amd64"}:
                return entry
        return named[0] if named else None

    def open_blob(self, digest: str) -> BinaryIO:
        try:
            return self._blob_path(digest).open("rb")
        except FileNotFoundError:
            raise ImageError(
                f"{self} lacks blob {digest}",
                hint="copy the image into the layout again (it is incomplete)",
            ) from None

    def _blob_path(self, digest: str) -> Path:
        algorithm, _, encoded = digest.partition(":")
        return self.path / "blobs" / algorithm / encoded


def _names(entry: Descriptor, reference: ImageReference) -> bool:
    name = entry.annotation(REF_NAME_ANNOTATION)
    if not name:
        return False
    if name == reference.tag:
        return True
    try:
        named = ImageReference.from_string(name)
    except ImageReferenceError:
        return False
    return named.name == reference.name and named.tag == reference.tag and named.digest is None
