"""The release images by name: their references, digests and configs, as the image build wrote them.

`release-images.json` beside this module is written by `contrast-build-images`, never by hand:
each image's config and `/etc/passwd`/`/etc/group`, read back from the built OCI layout with the
same reader `generate` uses for the user's images, and, in a release, the manifest digest. So a
release names every image by digest in the YAML it prints, and `generate` computes the policies of
the Coordinator, the Initializer and the sidecar from facts of exactly those images, keyed by that
digest, without a registry. A source tree's copy has the facts but no digests (a build of the
source gives other digests each time the code changes); the YAML then names images by tag, and
the commands that print release YAML say so. A test builds the images and checks that the facts
here are theirs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from contrast import __version__
from contrast.images.model import ImageConfig, ImageFacts

IMAGE_REPOSITORY = "ghcr.io/contrast-python"
# The interpreter of every release image (Debian bookworm's python3.11, `imagebuild.spec`): the
# image build installs it there, and the resources that run Python in a release image (the debug
# shell, the secure-PV probe) name it.
PYTHON = "/usr/bin/python3.11"
RESOURCE = "release-images.json"
NAMES = ("coordinator", "initializer", "service-mesh-proxy", "node-installer")
SOURCE_BUILD_NOTE = (
    "note: this is a source build, so release images are named by tag, not digest"
    " (a release pins them: contrast-build-images --write-package-data)"
)


def tagged(name: str) -> str:
    """The tag reference of release image `name`, e.g. ghcr.io/contrast-python/coordinator:0.1.0."""
    return f"{IMAGE_REPOSITORY}/{name}:{__version__}"


@dataclass(frozen=True)
class ReleaseImage:
    """One release image as the build recorded it."""

    name: str
    digest: str | None
    config: ImageConfig
    etc_passwd: str
    etc_group: str

    @property
    def reference(self) -> str:
        """What the release YAML names: pinned by digest when the build recorded one."""
        tag = tagged(self.name)
        return f"{tag}@{self.digest}" if self.digest else tag

    def facts(self, reference: str) -> ImageFacts:
        return ImageFacts(
            reference=reference,
            digest=self.digest or "",
            config=self.config,
            etc_passwd=self.etc_passwd,
            etc_group=self.etc_group,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "config": self.config.to_json(),
            "etc_passwd": self.etc_passwd,
            "etc_group": self.etc_group,
        }

    @classmethod
    def from_json(cls, name: str, raw: dict[str, Any]) -> ReleaseImage:
        return cls(
            name=name,
            digest=raw.get("digest"),
            config=ImageConfig.from_json(raw["config"]),
            etc_passwd=raw["etc_passwd"],
            etc_group=raw["etc_group"],
        )


def to_bytes(images: dict[str, ReleaseImage]) -> bytes:
    document = {"images": {name: images[name].to_json() for name in sorted(images)}}
    return json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"


@cache
def release_images() -> dict[str, ReleaseImage]:
    """The recorded images by name (a missing or partial record is a packaging bug)."""
    raw = json.loads(resources.files(__package__).joinpath(RESOURCE).read_bytes())
    return {name: ReleaseImage.from_json(name, raw["images"][name]) for name in NAMES}


def reference(name: str) -> str:
    return release_images()[name].reference


def pinned() -> bool:
    """Whether this build names its images by digest (a release) or by tag (a source tree)."""
    return all(image.digest for image in release_images().values())
