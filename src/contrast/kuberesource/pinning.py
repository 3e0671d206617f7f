"""Pinning container images to the digests their policies were generated for.

A policy names each image's layers; a tag that moves after `generate` would start a different
image, which the policy then refuses. So `generate` rewrites `repo:tag` to `repo:tag@sha256:…`
(the tag stays for readers), with the digests the image resolver found.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from contrast.kuberesource.workloads import ResourceError, Workload

_DIGEST = re.compile(r"^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$")


class PinningError(ResourceError):
    """A digest that cannot pin an image."""


def split_digest(image: str) -> tuple[str, str | None]:
    """`repo:tag@sha256:…` → (`repo:tag`, `sha256:…`); the digest is None when unpinned."""
    name, separator, digest = image.partition("@")
    return (name, digest) if separator else (image, None)


def is_pinned(image: str) -> bool:
    return split_digest(image)[1] is not None


def pinned_reference(image: str, digest: str) -> str:
    """`image` pinned to `digest`; an image pinned to that digest already stays as it is."""
    if not _DIGEST.match(digest):
        raise PinningError(
            f"{digest!r} is not a digest", hint="a digest looks like sha256:<64 hex digits>"
        )
    name, current = split_digest(image)
    if current is not None and current != digest:
        raise PinningError(
            f"image {image!r} is pinned to {current}, not to {digest}",
            hint="a pinned image resolves to its own digest; check the image resolver",
        )
    return f"{name}@{digest}"


def pin_images(workload: Workload, digests: Mapping[str, str]) -> bool:
    """Pin every container image found in `digests` (keyed by the image as written).

    Images not in `digests` stay as they are; running it on its own output changes nothing.
    Returns whether an image changed.
    """
    changed = False
    for container in workload.all_containers():
        image = container.get("image")
        if not isinstance(image, str) or image not in digests:
            continue
        pinned = pinned_reference(image, digests[image])
        if pinned != image:
            container["image"] = pinned
            changed = True
    return changed
