"""`--image-replacements FILE`, shared by `generate`, `runtime` and `coordinator-resources`.

Its own module so that the release commands need not import `generate`'s pipeline to take it.
The format and its semantics are in `contrast.kuberesource.imagereplace`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from contrast.kuberesource.imagereplace import ImageReplacements


def add_image_replacements(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--image-replacements",
        type=Path,
        metavar="FILE",
        help="replace images: one IMAGE=REPLACEMENT per line (# comments), e.g. to use a mirror",
    )


def image_replacements(arguments: argparse.Namespace) -> ImageReplacements:
    """The replacements the command was given (none without the flag)."""
    path: Path | None = arguments.image_replacements
    return ImageReplacements() if path is None else ImageReplacements.from_file(path)
