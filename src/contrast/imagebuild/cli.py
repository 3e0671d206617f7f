"""`contrast-build-images`: the release images as one OCI layout, or a fresh lock.

    contrast-build-images --output images/out        # build from images/lock.json
    contrast-build-images --relock                   # re-resolve images/lock.json

The build needs `mmdebstrap` (Debian) and either root or user namespaces for it, pip, and the
package registries (deb.debian.org, PyPI); wheels are cached (`--cache`) across builds.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from contrast.errors import ContrastError
from contrast.files import write_atomically
from contrast.imagebuild import debian, python
from contrast.imagebuild.build import build
from contrast.imagebuild.facts import read_back
from contrast.imagebuild.lock import BuildError, Lock
from contrast.imagebuild.spec import DEBIAN_SETS, PYTHON_SETS
from contrast.kuberesource.releaseimages import RESOURCE, to_bytes

# A fixed default, not the commit time, so that a build of uncommitted changes is reproducible too.
DEFAULT_EPOCH = 1700000000


class UsageError(BuildError):
    """Options of `contrast-build-images` that ask for no build (`--output` missing)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="contrast-build-images", description=__doc__.split("\n\n")[0]
    )
    source = Path(__file__).resolve().parents[3]
    parser.add_argument("--source", type=Path, default=source, help="the repository to build")
    parser.add_argument("--output", type=Path, help="OCI layout to write the images into")
    parser.add_argument("--lock", type=Path, help="default: SOURCE/images/lock.json")
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache/contrast/wheels",
        help="downloaded wheels, checked by sha256 before use",
    )  # fmt: skip
    parser.add_argument("--relock", action="store_true", help="re-resolve the lock and exit")
    record = parser.add_mutually_exclusive_group()
    record.add_argument(
        "--write-package-data",
        action="store_true",
        help="a release step: record the images' digests and facts in the CLI's package data",
    )
    record.add_argument(
        "--update-facts", action="store_true",
        help="record the images' facts, without digests, in the source tree's package data",
    )  # fmt: skip
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one line")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    lock_path = arguments.lock or arguments.source / "images/lock.json"
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", DEFAULT_EPOCH))
    try:
        if arguments.relock:
            write_atomically(lock_path, relock(epoch).to_bytes())
            print(f"wrote {lock_path}")
            return 0
        if arguments.output is None:
            raise UsageError("--output DIR is required to build", hint="or --relock")
        started = time.monotonic()
        release = build(
            arguments.source,
            arguments.output,
            lock=Lock.from_file(lock_path),
            cache=arguments.cache,
            epoch=epoch,
        )
    except ContrastError as error:
        if arguments.debug:
            raise
        print(f"contrast-build-images: {error.explain()}", file=sys.stderr)
        return 1
    if arguments.write_package_data or arguments.update_facts:
        record = read_back(arguments.output, with_digests=arguments.write_package_data)
        target = arguments.source / "src/contrast/kuberesource" / RESOURCE
        write_atomically(target, to_bytes(record))
        print(f"wrote {target}")
    for image in release.images:
        print(f"{image.name} {image.digest} {image.size / 1e6:.1f} MB")
    print(f"built in {time.monotonic() - started:.0f} s into {arguments.output}")
    return 0


def relock(epoch: int) -> Lock:
    """Debian versions as the mirror has them today; wheels within this environment's versions."""
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="contrast-relock-") as temporary:
        scratch = Path(temporary)
        constraints = scratch / "constraints.txt"
        constraints.write_text(frozen)
        debian_sets = {
            name: debian.resolve(include, epoch=epoch) for name, include in DEBIAN_SETS.items()
        }
        python_sets = {}
        for name, requirements in PYTHON_SETS.items():
            (scratch / name).mkdir()
            python_sets[name] = python.resolve(requirements, constraints, scratch / name)
    return Lock(debian=debian_sets, python=python_sets)


if __name__ == "__main__":
    sys.exit(main())
