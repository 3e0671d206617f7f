"""Image references as Docker normalises them: `nginx` is `docker.io/library/nginx:latest`.

The grammar is distribution's `reference` package (distribution/reference/regexp.go): the first
path component is a registry host only if it contains `.` or `:`, is `localhost`, or has upper-case
letters; otherwise the image lives on Docker Hub, where single-component names get `library/`.
A reference may carry a tag, a digest or both; with a digest, the digest decides what is pulled
and the tag is informational, as in containerd.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contrast.images.model import ImageError

DOCKER_HUB = "docker.io"
# Docker Hub's API is not served on the name users write.
DOCKER_HUB_API = "registry-1.docker.io"
_DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
DEFAULT_TAG = "latest"
MAX_NAME_LENGTH = 255

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_DOMAIN_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(rf"(?:{_DOMAIN_LABEL}(?:\.{_DOMAIN_LABEL})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


class ImageReferenceError(ImageError):
    """An image reference that does not follow the Docker reference grammar."""


def is_sha256_digest(value: str) -> bool:
    """`sha256:` and 64 lower-case hex digits, the only digest form this project verifies."""
    return _SHA256.fullmatch(value) is not None


@dataclass(frozen=True)
class ImageReference:
    """A normalised reference: registry host, repository path, optional tag and digest.

    `tag` is `latest` when the string named neither tag nor digest; a reference with only a digest
    keeps `tag=None`, so `str()` gives back exactly what pins the image.
    """

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def from_string(cls, text: str) -> ImageReference:
        """Parse and normalise `text`; `ImageReferenceError` says which part is malformed."""
        if not text or text != text.strip():
            raise ImageReferenceError(
                f"image reference {text!r} is empty or has surrounding whitespace",
                hint="write images as [registry/]repository[:tag][@sha256:digest]",
            )
        remainder = text
        digest: str | None = None
        if "@" in remainder:
            remainder, digest = remainder.split("@", 1)
            if _DIGEST.fullmatch(digest) is None:
                raise ImageReferenceError(
                    f"image reference {text!r} has a malformed digest {digest!r}"
                )
            if not is_sha256_digest(digest):
                raise ImageReferenceError(
                    f"image reference {text!r} uses digest {digest!r}, which is not sha256",
                    hint="pin images with @sha256: and 64 lower-case hex digits",
                )
        tag: str | None = None
        last_slash = remainder.rfind("/")
        colon = remainder.rfind(":")
        if colon > last_slash:
            remainder, tag = remainder[:colon], remainder[colon + 1 :]
            if _TAG.fullmatch(tag) is None:
                raise ImageReferenceError(f"image reference {text!r} has a malformed tag {tag!r}")
        registry, repository = _split_registry(remainder, text)
        if _DOMAIN.fullmatch(registry) is None:
            raise ImageReferenceError(
                f"image reference {text!r} has a malformed registry {registry!r}"
            )
        if registry in _DOCKER_HUB_ALIASES:
            registry = DOCKER_HUB
        if registry == DOCKER_HUB and "/" not in repository:
            repository = f"library/{repository}"
        if _REPOSITORY.fullmatch(repository) is None:
            raise ImageReferenceError(
                f"image reference {text!r} has a malformed repository {repository!r}",
                hint="repository names are lower-case letters, digits and . _ - separated by /",
            )
        if len(registry) + 1 + len(repository) > MAX_NAME_LENGTH:
            raise ImageReferenceError(
                f"image reference {text!r} is longer than {MAX_NAME_LENGTH} characters"
            )
        if tag is None and digest is None:
            tag = DEFAULT_TAG
        return cls(registry=registry, repository=repository, tag=tag, digest=digest)

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text

    @property
    def name(self) -> str:
        """Registry and repository, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def pinned(self) -> bool:
        """Whether the digest, not a mutable tag, decides what is pulled."""
        return self.digest is not None

    @property
    def api_host(self) -> str:
        """The host (and port) serving the registry's `/v2/` API."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def manifest_reference(self) -> str:
        """What goes after `/manifests/`: the digest when pinned, the tag otherwise."""
        if self.digest is not None:
            return self.digest
        assert self.tag is not None
        return self.tag


def _split_registry(name: str, text: str) -> tuple[str, str]:
    if not name:
        raise ImageReferenceError(f"image reference {text!r} has no repository name")
    first, separator, rest = name.partition("/")
    is_host = (
        any(character in first for character in ".:")
        or first == "localhost"
        or first.lower() != first
    )
    if separator and is_host:
        if not rest:
            raise ImageReferenceError(
                f"image reference {text!r} has no repository after the registry"
            )
        return first, rest
    return DOCKER_HUB, name
