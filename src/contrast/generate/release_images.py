"""Images whose configs this release defines, so `generate` needs no registry to describe them.

The Coordinator, Initializer and service-mesh images are built from this project with the
`contrast` program as entrypoint, running as root (the Initializer and the sidecar change
iptables rules and write `/contrast`). The pause image is the one the runtime's guest image
brings along for the sandbox container under guest pull, so its config is fixed by the runtime
release too. A registry is asked only for images the user brings.
"""

from __future__ import annotations

from collections.abc import Mapping

from contrast.images.model import ImageConfig, ImageFacts
from contrast.kuberesource import release

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ROOT_PASSWD = "root:x:0:0:root:/root:/bin/sh\n"  # noqa: S105 (an /etc/passwd line)
ROOT_GROUP = "root:x:0:\n"
PAUSE_IMAGES = ("mcr.microsoft.com/oss/kubernetes/pause:3.6", "registry.k8s.io/pause:3.6")


def _contrast_image(reference: str) -> ImageFacts:
    return ImageFacts(
        reference=reference,
        digest="",
        config=ImageConfig(user="0:0", env=(DEFAULT_PATH,), entrypoint=("contrast",)),
        etc_passwd=ROOT_PASSWD,
        etc_group=ROOT_GROUP,
    )


def _pause_image(reference: str) -> ImageFacts:
    return ImageFacts(
        reference=reference,
        digest="",
        config=ImageConfig(user="65535:65535", env=(DEFAULT_PATH,), entrypoint=("/pause",)),
    )


def known_images() -> Mapping[str, ImageFacts]:
    """Facts by image string, as the YAML and the policy settings write them."""
    contrast_images = (
        release.COORDINATOR_IMAGE,
        release.INITIALIZER_IMAGE,
        release.SERVICE_MESH_IMAGE,
    )
    facts = {image: _contrast_image(image) for image in contrast_images}
    facts.update({image: _pause_image(image) for image in PAUSE_IMAGES})
    return facts
