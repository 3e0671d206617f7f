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
Each base layer blob is read once, by that check: the new layout gets the very file that was
hashed as a hard link (`_place`), not a second copy; only where it cannot be linked (another file
system, a file the user may not link, a file changed since the check) is it copied, and then
hashed again as it is copied, never put in unchecked.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import shlex
import shutil
import stat
import tempfile
from collections.abc import Mapping
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
class CheckedBlob:
    """A base layer's blob as `read_base` hashed it, and the file it hashed: device, inode, size
    and modification time, read from the open file after the last byte, so the file linked into
    the new layout can be told to be that file, unchanged."""

    descriptor: Descriptor
    path: Path
    identity: tuple[int, int, int, int]


@dataclass(frozen=True)
class BaseImage:
    """The node-installer image as read from its layout, every blob checked against its digest."""

    layout: OciLayout
    name: str  # the reference it was found by
    digest: str
    manifest: Mapping[str, Any]
    config: Mapping[str, Any]
    layers: tuple[CheckedBlob, ...]


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
    layers = tuple(_check_blob(layout, layer, where) for layer in parsed.layers)
    return BaseImage(layout, name, digest, manifest, json.loads(config_data), layers)


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
        for checked in base.layers:
            _place(checked, writer)
        writer.blob(config_data)
        digest = writer.add_manifest(name, manifest_data)
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


def _check_blob(layout: OciLayout, descriptor: Descriptor, where: str) -> CheckedBlob:
    path = _blob_path(layout, descriptor.digest)
    hasher = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as file:
            while chunk := file.read(_COPY_CHUNK):
                hasher.update(chunk)
                size += len(chunk)
            status = os.fstat(file.fileno())
    except FileNotFoundError:
        raise PayloadImageError(f"{where}: the layout lacks layer {descriptor.digest}") from None
    except OSError as error:
        raise PayloadImageError(
            f"{where}: layer {descriptor.digest} cannot be read: {error.strerror}"
        ) from None
    if f"sha256:{hasher.hexdigest()}" != descriptor.digest or size != descriptor.size:
        raise PayloadImageError(f"{where}: layer {descriptor.digest} does not match its digest")
    return CheckedBlob(descriptor, path, _identity(status))


def _identity(status: os.stat_result) -> tuple[int, int, int, int]:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


# Why a link cannot be made: another file system, a file of another user (fs.protected_hardlinks),
# a file system without links, the link count at its limit. Anything else is an error.
_CANNOT_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EACCES, errno.EMLINK, errno.ENOTSUP})


def _place(checked: CheckedBlob, writer: LayoutWriter) -> None:
    """Put the base layer `checked` into the layout `writer` writes, without reading it again.

    A hard link to the blob `read_base` hashed: the link's inode, size and mtime must be those
    of the file it hashed, which it was not when the file was replaced or written since. Where
    no link can be made, or it is not that file, the blob is copied and hashed on the way (the
    writer's `import_blob`), so a changed blob is refused then and nothing is left in the layout.
    """
    digest = checked.descriptor.digest
    destination = writer.blobs / digest.removeprefix("sha256:")
    if destination.exists():
        return  # the same blob twice in the image, or the payload layer is one of them
    try:
        os.link(checked.path, destination)
    except OSError as error:
        if error.errno not in _CANNOT_LINK:
            raise PayloadImageError(
                f"layer {digest} cannot be linked into {writer.path}: {error.strerror}"
            ) from None
    else:
        if _identity(destination.stat()) == checked.identity:
            return
        destination.unlink()
    try:
        writer.import_blob(checked.path, digest, checked.descriptor.size)
    except BuildError:
        raise PayloadImageError(
            f"{checked.path} changed after it was checked: it no longer holds layer {digest}"
        ) from None
    except OSError as error:
        raise PayloadImageError(
            f"layer {digest} cannot be copied from {checked.path}: {error.strerror}"
        ) from None
