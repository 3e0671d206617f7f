"""Read the built images back as `generate` reads any image, and record what it found.

The record is `contrast.kuberesource.releaseimages`' file: each image's digest, config and
users, taken from the OCI layout through `ImageResolver` (the reader `generate` uses for the
user's images), so nothing in it is written by hand.
"""

from __future__ import annotations

from pathlib import Path

from contrast.images.resolver import ImageResolver
from contrast.kuberesource.releaseimages import NAMES, ReleaseImage, tagged


def read_back(layout: Path, *, with_digests: bool) -> dict[str, ReleaseImage]:
    references = {name: tagged(name) for name in NAMES}
    found = ImageResolver(oci_layouts=[layout]).resolve(list(references.values()))
    images = {}
    for name, reference in references.items():
        facts = found[reference]
        images[name] = ReleaseImage(
            name=name,
            digest=facts.digest if with_digests else None,
            config=facts.config,
            etc_passwd=facts.etc_passwd,
            etc_group=facts.etc_group,
        )
    return images
