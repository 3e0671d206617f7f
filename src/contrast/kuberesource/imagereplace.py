"""`--image-replacements FILE`: run the same resources on images under other names.

A mirror for an air-gapped cluster, or a development build of this project's images, needs the
resources to name other images than the release does. The original reads such a file with
`ImageReplacementsFromFile` (edgelesssys/contrast, internal/kuberesource/lookup.go at commit
9af55e0f42fb44987773597c98e6259b99c99a2d) and applies it with `PatchImages`
(internal/kuberesource/mutators.go at 037fe0f894771b393c837a7470c7c68c9d2db65f): in `contrast
generate` (cli/cmd/generate.go at 04dfea11c5d31fdfd82fc5c2d2f870aee6f4b68f) after the Initializer
and the sidecar are injected and before policies are computed, and in its resource generator for
the runtime and Coordinator resources (internal/kuberesource/resourcegen/main.go). Facts taken
from there, and kept:

- one `IMAGE=REPLACEMENT` per line, spaces allowed around `=`;
- empty lines and lines starting with `#` are skipped;
- an image is replaced when the container's `image` string equals IMAGE exactly (no
  normalisation, no prefix or tag matching), and replaced once: replacements do not chain.

Stricter than the original, on purpose, because each of these would otherwise be a silent
surprise in a file that decides which code runs in the TEE:

- The original matches an unanchored pattern, so `a=b c` meant `a=b` and `x a=b` meant `a=b`;
  here a line is one pair and nothing else (a trailing ` # comment` is allowed). Lines of only
  spaces, and comments indented by spaces, are skipped too (the original refused the first and
  read `  # a=b` as a pair).
- Both sides must be image references (`contrast.images.reference`), so a typo fails here
  instead of in a pod that cannot pull.
- One image with two different replacements is refused; the original kept the last one.
- An image that is both replaced and a replacement (`a=b` and `b=c`) is refused: the result would
  depend on how many times `generate` ran over its own output.

The original also replaces only `containers` and `initContainers`; ephemeral containers are
replaced here as well, since they run images of the same pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contrast.images.reference import ImageReference, ImageReferenceError
from contrast.kuberesource.workloads import ResourceError, Workload, workloads

MAX_FILE_BYTES = 1024 * 1024
MAX_REFERENCE_LENGTH = 512  # name (255), tag (128), digest (71) and separators fit
FORMAT_HINT = "write one IMAGE=REPLACEMENT per line; # starts a comment"


class ImageReplacementError(ResourceError):
    """An image replacements file that cannot be read or does not say one thing per line."""


def _reference(text: str, where: str, side: str) -> str:
    if len(text) > MAX_REFERENCE_LENGTH:
        raise ImageReplacementError(
            f"{where}: the {side} {_shown(text)} is longer than an image reference can be"
        )
    try:
        ImageReference.from_string(text)
    except ImageReferenceError as error:
        raise ImageReplacementError(f"{where}: {side} {error.message}", hint=error.hint) from None
    return text


def _shown(content: str) -> str:
    """A line as an error message quotes it: at most 80 characters of it."""
    return repr(content if len(content) <= 80 else f"{content[:80]}…")


def _pair(line: str, where: str) -> tuple[str, str] | None:
    """The pair on one line, or None for a blank line or a comment."""
    content = line.strip()
    if not content or content.startswith("#"):
        return None
    image, separator, rest = content.partition("=")
    image = image.strip()
    # A trailing comment is separated by whitespace; `#` is no character of an image reference.
    words = rest.split()
    words = words[: next((i for i, w in enumerate(words) if w.startswith("#")), len(words))]
    if not separator:
        raise ImageReplacementError(
            f"{where}: {_shown(content)} is not IMAGE=REPLACEMENT", hint=FORMAT_HINT
        )
    if not image:
        raise ImageReplacementError(f"{where}: no image before '='", hint=FORMAT_HINT)
    if not words:
        raise ImageReplacementError(f"{where}: no replacement for {image!r}", hint=FORMAT_HINT)
    replacement = words[0]
    if len(words) > 1 or len(image.split()) > 1 or "=" in replacement:
        raise ImageReplacementError(
            f"{where}: {_shown(content)} is not one IMAGE=REPLACEMENT pair", hint=FORMAT_HINT
        )
    return _reference(image, where, "image"), _reference(replacement, where, "replacement")


@dataclass(frozen=True)
class ImageReplacements:
    """Which image strings to replace by which; empty replaces nothing."""

    table: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_text(cls, text: str, source: str = "image replacements") -> ImageReplacements:
        """Parse the file format above; errors name `source` and the line number."""
        table: dict[str, str] = {}
        lines: dict[str, int] = {}
        # Lines end at \n only, as in the original and in editors (not at \x85 or \u2028).
        for number, line in enumerate(text.split("\n"), start=1):
            where = f"{source}:{number}"
            pair = _pair(line, where)
            if pair is None:
                continue
            image, replacement = pair
            if image in table and table[image] != replacement:
                raise ImageReplacementError(
                    f"{where}: {image!r} is replaced by {replacement!r} here but by"
                    f" {table[image]!r} on line {lines[image]}",
                    hint="keep one of the two lines",
                )
            table.setdefault(image, replacement)
            lines.setdefault(image, number)
        for image, replacement in table.items():
            if replacement != image and replacement in table and table[replacement] != replacement:
                raise ImageReplacementError(
                    f"{source}:{lines[image]}: {replacement!r} replaces {image!r} and is itself"
                    f" replaced on line {lines[replacement]}",
                    hint=f"replace {image!r} by {table[replacement]!r} directly",
                )
        return cls(table)

    @classmethod
    def from_file(cls, path: Path) -> ImageReplacements:
        try:
            with path.open("rb") as file:
                data = file.read(MAX_FILE_BYTES + 1)
        except OSError as error:
            raise ImageReplacementError(
                f"cannot read the image replacements {path}: {error.strerror}"
            ) from None
        if len(data) > MAX_FILE_BYTES:
            raise ImageReplacementError(
                f"the image replacements {path} are larger than {MAX_FILE_BYTES} bytes"
            )
        try:
            text = data.decode()
        except UnicodeDecodeError as error:
            raise ImageReplacementError(
                f"the image replacements {path} are not UTF-8 (byte {error.start})"
            ) from None
        return cls.from_text(text, str(path))

    def __bool__(self) -> bool:
        return bool(self.table)

    def replace_in(self, workload: Workload) -> bool:
        """Replace the images of the workload's containers; whether any changed."""
        changed = False
        for container in (*workload.all_containers(), *workload.ephemeral_containers()):
            changed |= self._replace(container)
        return changed

    def _replace(self, container: MutableMapping[str, Any]) -> bool:
        image = container.get("image")
        if not isinstance(image, str) or image not in self.table:
            return False
        replacement = self.table[image]
        if replacement == image:
            return False
        container["image"] = replacement
        return True

    def replace_all(self, resources: Iterable[Any]) -> bool:
        """Replace the images of every workload among `resources`; whether any changed."""
        changed = False
        for workload in workloads(resources):
            changed |= self.replace_in(workload)
        return changed
