"""The node-installer image with a built runtime's payload as one more layer.

`contrast runtime build --node-installer-layout DIR --image-repository REPO` takes the release's
node-installer image from the OCI layout DIR (as `contrast-build-images --output DIR` writes it, or
`skopeo copy docker://…/node-installer:V oci:DIR:V`), adds ONE layer holding the payload at
`/usr/share/contrast/runtimes/<handler>/` and writes the result into an OCI layout of its own, named
`REPO:<handler>` there. The DaemonSet then names it `REPO@sha256:…`, so a node runs exactly this
image, and the installer in it still checks every payload file against `runtime.json`.

The layer is written by `layer.write_layer` (sorted entries, one fixed time, root owners, no gzip
name or time) straight into the new layout's blobs, each payload file read in chunks, so a
payload of a gigabyte takes little memory; modes are 0755 or 0644 from the payload's execute bits;
the config is the base image's with one diff_id and one history entry added (its entrypoint, user,
environment and `created` unchanged): the same base image and payload give the same digest.

Everything the base image needs is read and checked (layout, index entry, manifest, config, every
layer blob against its digest) before anything is written, so a wrong layout changes nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shlex
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from contrast.boundedfile import read_bounded
from contrast.files import replace_directory
from contrast.imagebuild.layer import Entry, Layer
from contrast.imagebuild.lock import BuildError
from contrast.imagebuild.oci import CONFIG_TYPE, LAYER_TYPE, LayoutWriter, canonical_json
from contrast.images.layout import OciLayout
from contrast.images.manifest import (
    MAX_DOCUMENT_SIZE,
    OCI_MANIFEST,
    REF_NAME_ANNOTATION,
    ConfigBlob,
    Descriptor,
    Index,
    parse_manifest,
)
from contrast.images.model import ImageError
from contrast.images.reference import ImageReference
from contrast.kuberesource.release import PAYLOAD_IMAGE_DIRECTORY
from contrast.kuberesource.releaseimages import tagged

# The release images' default epoch (`imagebuild.cli.DEFAULT_EPOCH`, not imported: that module
# pulls in the whole image build): a constant, not the clock, so the same payload gives one layer.
EPOCH = 1700000000
NODE_INSTALLER = "node-installer"
_COPY_CHUNK = 1 << 20
_LAYOUT_HINT = (
    "pass the OCI layout of the release images (contrast-build-images --output DIR), or copy the"
    " node-installer image into one: skopeo copy docker://IMAGE oci:DIR:TAG"
)


class PayloadImageError(BuildError):
    """The node-installer image cannot be read, or the payload image cannot be written."""


@dataclass(frozen=True)
class BaseImage:
    """The node-installer image as read from its layout, every blob checked against its digest."""

    layout: OciLayout
    name: str  # the reference it was found by
    digest: str
    manifest: Mapping[str, Any]
    config: Mapping[str, Any]
    layers: tuple[Descriptor, ...]


@dataclass(frozen=True)
class PayloadImage:
    """The written image: where it is, what it is called there, and what the DaemonSet names."""

    layout: Path
    name: str  # REPOSITORY:<handler>, the layout's ref name and the tag to push
    digest: str
    layer: Layer
    base: str  # the node-installer image's manifest digest
    repository: str

    @property
    def pinned(self) -> str:
        return f"{self.repository}@{self.digest}"

    @property
    def push_command(self) -> list[str]:
        """`skopeo copy` that pushes the image unchanged, so the digest the YAML names holds."""
        return [
            "skopeo", "copy", "--preserve-digests",
            f"oci:{self.layout}:{self.name}", f"docker://{self.name}",
        ]  # fmt: skip

    def push_command_line(self) -> str:
        return shlex.join(self.push_command)


def check_repository(repository: str) -> str:
    """`REPO` as the user gave it: a repository to push to, without tag or digest."""
    try:
        ImageReference.from_string(repository)
    except ImageError as error:
        raise PayloadImageError(f"--image-repository: {error.message}") from None
    if "@" in repository or ":" in repository.rpartition("/")[2]:
        raise PayloadImageError(
            f"--image-repository {repository!r} names a tag or digest",
            hint="give the repository only (registry.example.com/contrast/node-installer); the tag"
            " is the runtime handler and the YAML names the image by digest",
        )
    return repository


def read_base(layout_path: Path, name: str = tagged(NODE_INSTALLER)) -> BaseImage:
    """The image `name` in the OCI layout at `layout_path`, or one PayloadImageError line."""
    try:
        layout = OciLayout(layout_path)
    except ImageError as error:
        raise PayloadImageError(
            f"--node-installer-layout: {error.message}", hint=_LAYOUT_HINT
        ) from None
    where = f"{layout} image {name}"
    entry = layout.find(ImageReference.from_string(name))
    if entry is None:
        held = sorted(filter(None, (e.annotation(REF_NAME_ANNOTATION) for e in layout.entries)))
        raise PayloadImageError(
            f"{layout} has no image {name} (it holds {', '.join(held) or 'no named image'})",
            hint=_LAYOUT_HINT,
        )
    data = _read_blob(layout, entry.digest, where)
    parsed = parse_manifest(data, entry.media_type, where)
    digest = entry.digest
    if isinstance(parsed, Index):
        digest = parsed.select_platform(where).digest
        data = _read_blob(layout, digest, where)
        parsed = parse_manifest(data, OCI_MANIFEST, where)
        if isinstance(parsed, Index):
            raise PayloadImageError(f"{where}: an index inside an index is not supported")
    manifest = json.loads(data)
    if manifest.get("mediaType", OCI_MANIFEST) != OCI_MANIFEST:
        raise PayloadImageError(
            f"{where} is not an OCI image manifest ({manifest.get('mediaType')})",
            hint="copy it as OCI: skopeo copy --format oci docker://IMAGE oci:DIR:TAG",
        )
    config_data = _read_blob(layout, parsed.config.digest, where)
    diff_ids = ConfigBlob.from_bytes(config_data, where).diff_ids
    if len(diff_ids) != len(parsed.layers):
        raise PayloadImageError(
            f"{where}: {len(parsed.layers)} layers but {len(diff_ids)} diff_ids in its config"
        )
    for layer in parsed.layers:
        _check_blob(layout, layer, where)
    return BaseImage(layout, name, digest, manifest, json.loads(config_data), parsed.layers)


def payload_entries(payload: Path, handler: str) -> list[Entry]:
    """Every file and directory of `payload`, below `/usr/share/contrast/runtimes/<handler>/`."""
    root = PurePosixPath(PAYLOAD_IMAGE_DIRECTORY.lstrip("/"), handler)
    entries = [Entry.directory(str(root))]
    for path in sorted(payload.rglob("*")):
        inside = str(root / path.relative_to(payload).as_posix())
        mode = path.lstat().st_mode
        if stat.S_ISDIR(mode):
            entries.append(Entry.directory(inside))
        elif stat.S_ISREG(mode):
            executable = mode & 0o111 != 0
            entries.append(Entry.from_file(inside, path, 0o755 if executable else 0o644))
        else:
            raise PayloadImageError(f"the payload's {path} is neither a file nor a directory")
    return entries


def write_payload_image(
    base: BaseImage, payload: Path, handler: str, output: Path, *, repository: str
) -> PayloadImage:
    """Write `base` plus the payload layer as the only image of the OCI layout at `output`.

    The layout is assembled beside `output` and renamed into place, replacing an earlier one whole.
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.staging-", dir=output.parent))
    try:
        writer = LayoutWriter(staging)
        layer = writer.layer(payload_entries(payload, handler), EPOCH)
        config_data, manifest_data = _documents(base, layer, handler)
        name = f"{repository}:{handler}"
        for descriptor in base.layers:
            _copy_blob(base.layout, descriptor.digest, staging)
        writer.blob(config_data)
        digest = writer.blob(manifest_data)
        writer.images.append(
            (
                name,
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest,
                    "size": len(manifest_data),
                    "annotations": {REF_NAME_ANNOTATION: name},
                    "platform": {"architecture": "amd64", "os": "linux"},
                },
            )
        )
        writer.finish()
        replace_directory(staging, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return PayloadImage(output, name, digest, layer, base.digest, repository)


def _documents(base: BaseImage, layer: Layer, handler: str) -> tuple[bytes, bytes]:
    """The config and manifest of `base` with `layer` on top."""
    config = copy.deepcopy(dict(base.config))
    config["rootfs"]["diff_ids"].append(layer.diff_id)
    step: dict[str, Any] = {"created_by": f"contrast runtime build: {handler}"}
    if "created" in config:
        step = {"created": config["created"], **step}
    config["history"] = [*config.get("history", []), step]
    config_data = canonical_json(config)
    manifest = copy.deepcopy(dict(base.manifest))
    manifest["config"] = {
        **manifest["config"],
        "mediaType": manifest["config"].get("mediaType", CONFIG_TYPE),
        "digest": _sha256(config_data),
        "size": len(config_data),
    }
    manifest["layers"] = [
        *manifest["layers"],
        {"mediaType": LAYER_TYPE, "digest": layer.digest, "size": layer.size},
    ]
    manifest_data = canonical_json(manifest)
    return config_data, manifest_data


def _sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _blob_path(layout: OciLayout, digest: str) -> Path:
    return layout.path / "blobs" / "sha256" / digest.removeprefix("sha256:")


def _read_blob(layout: OciLayout, digest: str, where: str) -> bytes:
    try:
        data = read_bounded(_blob_path(layout, digest), MAX_DOCUMENT_SIZE, what=f"{where} {digest}")
    except FileNotFoundError:
        raise PayloadImageError(f"{where}: the layout lacks blob {digest}") from None
    except OSError as error:
        raise PayloadImageError(
            f"{where}: blob {digest} cannot be read: {error.strerror}"
        ) from None
    if _sha256(data) != digest:
        raise PayloadImageError(f"{where}: blob {digest} does not match its digest")
    return data


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as file:
        while chunk := file.read(_COPY_CHUNK):
            yield chunk


def _check_blob(layout: OciLayout, descriptor: Descriptor, where: str) -> None:
    path = _blob_path(layout, descriptor.digest)
    hasher = hashlib.sha256()
    size = 0
    try:
        for chunk in _chunks(path):
            hasher.update(chunk)
            size += len(chunk)
    except FileNotFoundError:
        raise PayloadImageError(f"{where}: the layout lacks layer {descriptor.digest}") from None
    except OSError as error:
        raise PayloadImageError(
            f"{where}: layer {descriptor.digest} cannot be read: {error.strerror}"
        ) from None
    if f"sha256:{hasher.hexdigest()}" != descriptor.digest or size != descriptor.size:
        raise PayloadImageError(f"{where}: layer {descriptor.digest} does not match its digest")


def _copy_blob(layout: OciLayout, digest: str, target: Path) -> None:
    destination = target / "blobs" / "sha256" / digest.removeprefix("sha256:")
    if not destination.exists():
        shutil.copyfile(_blob_path(layout, digest), destination)
