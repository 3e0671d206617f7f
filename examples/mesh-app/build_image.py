"""Build the mesh-app image the way the release images are built, into an OCI layout.

    .venv/bin/python examples/mesh-app/build_image.py --release images/out --output images/mesh-app

The image is two layers: the release images' own base layer (Debian bookworm's Python 3.11,
unpacked without maintainer scripts, no shell, no package manager), taken as is from the release
layout `contrast-build-images` wrote, and one layer with `meshapp.py`, written by the release
build's layer writer (sorted tar entries, one time, root owners), so the same inputs give the same
digest. It needs no Debian mirror, no PyPI and no Docker: the app uses the standard library only
(`sqlite3` included, which Debian's libpython3.11-stdlib carries with libsqlite3).

Reusing the release base rather than building a root file system of its own keeps the example's
image a few kilobytes on top of what the cluster already pulled, and keeps it reproducible for the
same reason the release images are.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from contrast.imagebuild.cli import DEFAULT_EPOCH
from contrast.imagebuild.layer import Entry, Layer
from contrast.imagebuild.oci import LayoutWriter
from contrast.imagebuild.spec import PYTHON, ImageSpec
from contrast.images.manifest import REF_NAME_ANNOTATION
from contrast.kuberesource.releaseimages import tagged

APP = Path(__file__).resolve().parent / "meshapp.py"
IMAGE_PATH = "/app/meshapp.py"
# The name the example's YAML gives the image; replace it with your registry's copy
# (`--image-replacements`), as for the release images.
REFERENCE = "example.com/contrast/mesh-app:1.0"
# The release image whose base layer the app runs on (every release image has the same one).
BASE_IMAGE = "coordinator"


@dataclass(frozen=True)
class AppImageSpec(ImageSpec):
    """A release-style image whose entrypoint is the app under the release's Python."""

    @property
    def entrypoint(self) -> tuple[str, ...]:
        return (PYTHON, "-I", IMAGE_PATH)


# Root, as the release images: the Initializer writes the workload secret and the mesh key
# readable by root only (0400, as the original), and db reads the secret.
SPEC = AppImageSpec("mesh-app", debian_set="python", python_set="", cmd=("web",))


def base_layer(release: Path) -> Layer:
    """The first layer of the release image `BASE_IMAGE` in the layout at `release`."""
    index = json.loads((release / "index.json").read_text())
    wanted = tagged(BASE_IMAGE)
    descriptors = [
        m for m in index["manifests"] if m.get("annotations", {}).get(REF_NAME_ANNOTATION) == wanted
    ]
    if len(descriptors) != 1:
        raise SystemExit(f"{release}: no image {wanted} (build it with contrast-build-images)")
    manifest = json.loads(_blob(release, descriptors[0]["digest"]))
    config = json.loads(_blob(release, manifest["config"]["digest"]))
    layer = manifest["layers"][0]
    path = _blob_path(release, layer["digest"])
    return Layer(layer["digest"], config["rootfs"]["diff_ids"][0], layer["size"], path=path)


def _blob(layout: Path, digest: str) -> bytes:
    return _blob_path(layout, digest).read_bytes()


def _blob_path(layout: Path, digest: str) -> Path:
    algorithm, _, value = digest.partition(":")
    return layout / "blobs" / algorithm / value


def build(release: Path, output: Path, *, epoch: int = DEFAULT_EPOCH) -> str:
    """Writes the layout at `output` with the image under `REFERENCE`; returns its digest."""
    writer = LayoutWriter(output)
    app = writer.layer([Entry.file(IMAGE_PATH, APP.read_bytes())], epoch)
    built = writer.image(SPEC, [base_layer(release), app], epoch=epoch)
    # LayoutWriter names images as releases; this one is the user's, under the example's name.
    _, descriptor = writer.images[-1]
    descriptor["annotations"][REF_NAME_ANNOTATION] = REFERENCE
    writer.finish()
    return built.digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", type=Path, required=True, help="the release OCI layout")
    parser.add_argument("--output", type=Path, required=True, help="the OCI layout to write")
    arguments = parser.parse_args(argv)
    digest = build(arguments.release, arguments.output)
    print(f"{REFERENCE} {digest} in {arguments.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
