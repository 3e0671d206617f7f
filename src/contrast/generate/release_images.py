"""Facts of the images whose configs this release knows, so `generate` needs no registry for them.

The Coordinator, Initializer and service-mesh images' facts are the build's record of the built
images (`contrast.kuberesource.releaseimages`), under both their tag and, in a release, their
digest reference. The pause image is the one the runtime's guest image brings along for the
sandbox container under guest pull, so its config is fixed by the runtime release, not by an
image this project builds; it is the one entry still described here. A registry is asked only
for images the user brings.
"""

from __future__ import annotations

from collections.abc import Mapping

from contrast.images.model import ImageConfig, ImageFacts
from contrast.kuberesource.releaseimages import release_images, tagged

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PAUSE_IMAGES = ("mcr.microsoft.com/oss/kubernetes/pause:3.6", "registry.k8s.io/pause:3.6")
# The images whose facts generate takes from the record: those that run in confidential pods.
POLICY_IMAGES = ("coordinator", "initializer", "service-mesh-proxy")


def _pause_image(reference: str) -> ImageFacts:
    return ImageFacts(
        reference=reference,
        digest="",
        config=ImageConfig(user="65535:65535", env=(DEFAULT_PATH,), entrypoint=("/pause",)),
    )


def known_images() -> Mapping[str, ImageFacts]:
    """Facts by image string, as the YAML and the policy settings write them."""
    facts = {}
    recorded = release_images()
    for name in POLICY_IMAGES:
        image = recorded[name]
        for reference in {tagged(name), image.reference}:
            facts[reference] = image.facts(reference)
    facts.update({image: _pause_image(image) for image in PAUSE_IMAGES})
    return facts
