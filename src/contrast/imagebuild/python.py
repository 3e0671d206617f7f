"""The Python layer: the project's wheel and its locked dependencies, compiled ahead of time.

pip does what it is good at (download by pinned hash, unpack wheels for another platform); the
image's own interpreter, run from the unpacked Debian tree through that tree's dynamic loader,
compiles every module to unchecked-hash .pyc files. The byte code is then exactly what the image's
Python would write, no root or chroot is needed, and a container never compiles at start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

from contrast.imagebuild.layer import Entry
from contrast.imagebuild.lock import BuildError, Wheel
from contrast.imagebuild.spec import PYTHON

# Debian bookworm has glibc 2.36: wheels for any manylinux up to that one run there. pip takes the
# tags literally, so every one is listed.
MANYLINUX = tuple(f"--platform=manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1))
TARGET_PLATFORM = (
    "--only-binary=:all:", *MANYLINUX, "--platform=manylinux2014_x86_64",
    "--platform=manylinux2010_x86_64", "--platform=manylinux1_x86_64", "--python-version=3.11",
    "--implementation=cp", "--abi=cp311", "--abi=abi3", "--abi=none",
)  # fmt: skip
PIP = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "--quiet")


def _run(command: Sequence[str], what: str, **kwargs: object) -> str:
    result = subprocess.run(  # noqa: S603
        list(command),
        capture_output=True,
        text=True,
        check=False,
        **kwargs,  # type: ignore[call-overload]
    )
    if result.returncode != 0:
        detail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]
        raise BuildError(f"{what} failed: {' / '.join(detail)}")
    return str(result.stdout)


def resolve(requirements: Sequence[str], constraints: Path, scratch: Path) -> tuple[Wheel, ...]:
    """The wheels pip picks for `requirements` on the images' platform (for --relock)."""
    report = scratch / "report.json"
    _run(
        [*PIP, "install", "--dry-run", "--ignore-installed", "--target", str(scratch / "t"),
         *TARGET_PLATFORM, "--report", str(report), "-c", str(constraints), *requirements],
        "pip resolving " + " ".join(requirements),
    )  # fmt: skip
    wheels = []
    for item in json.loads(report.read_text())["install"]:
        url = item["download_info"]["url"]
        metadata = item["metadata"]
        wheels.append(
            Wheel(
                name=metadata["name"].lower().replace("_", "-"),
                version=metadata["version"],
                filename=PurePosixPath(url).name.split("#")[0],
                sha256=item["download_info"]["archive_info"]["hashes"]["sha256"],
            )
        )
    return tuple(sorted(wheels, key=lambda wheel: wheel.name))


def download(wheels: Sequence[Wheel], cache: Path, scratch: Path) -> None:
    """Every locked wheel in `cache`, its sha256 checked by pip."""
    requirements = scratch / "requirements.txt"
    requirements.write_text("".join(wheel.requirement() + "\n" for wheel in wheels))
    _run(
        [*PIP, "download", "--no-deps", "--require-hashes", "-r", str(requirements),
         "--dest", str(cache), *TARGET_PLATFORM],
        "pip downloading the locked wheels",
    )  # fmt: skip


# What the wheel is built from: setuptools reads nothing else (pyproject.toml's readme and
# packages.find under src).
PROJECT_FILES = ("pyproject.toml", "README.md")
PROJECT_TREE = "src"
_NOT_SOURCE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def project_wheel(source: Path, output: Path, *, epoch: int) -> Path:
    """This project's wheel, built from a copy of `source` without build isolation (offline).

    From a copy in `output`'s parent, never in place: setuptools builds in the source's `build/`,
    where a checkout keeps whatever an earlier build left (a module deleted since is still in
    `build/lib` and would be shipped), and two builds of one checkout at once collide there.
    """
    copy = output.parent / f"{output.name}-source"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir(parents=True)
    for name in PROJECT_FILES:
        shutil.copy2(source / name, copy / name)
    shutil.copytree(source / PROJECT_TREE, copy / PROJECT_TREE, ignore=_NOT_SOURCE)
    output.mkdir(parents=True, exist_ok=True)
    _run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(output),
         str(copy)],
        "building the contrast wheel",
        env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)},
    )  # fmt: skip
    (wheel,) = output.glob("contrast-*.whl")
    return wheel


def install(requirements: Sequence[str], wheels: Sequence[Path], target: Path) -> None:
    """Unpack the wheels of `requirements` from the `wheels` directories into `target`.

    By name from a wheel directory, not by file: pip records a wheel installed by path in a
    `direct_url.json` that names the path, which would make the image depend on the build host.
    """
    links = [f"--find-links={directory}" for directory in wheels]
    _run(
        [*PIP, "install", "--no-deps", "--no-index", *links, "--no-compile", "--target",
         str(target), *TARGET_PLATFORM, *requirements],
        "pip unpacking wheels",
    )  # fmt: skip


def unpack_interpreter(archive: Path, destination: Path) -> None:
    """The Debian tree's interpreter, libraries and standard library, to run on this host."""
    with tarfile.open(archive) as tar:
        members = [
            member
            for member in tar
            if (member.isfile() or member.issym() or member.isdir() or member.islnk())
            and member.name.removeprefix("./").split("/")[0] in {"usr", "lib", "lib64"}
        ]
        tar.extractall(destination, members=members, filter="tar")


def compile_tree(interpreter: Path, directory: Path, image_path: str) -> None:
    """Compile `directory` (at `image_path` in the image) with the image's own Python.

    `interpreter` is the unpacked Debian tree; its Python runs through the tree's own dynamic
    loader and libraries with PYTHONHOME at the tree, so the host's Python plays no part. `-s`/`-p`
    make each .pyc name its path inside the image, and PYTHONHASHSEED=0 keeps set constants in one
    order. `-B` keeps the modules compileall itself imports from being written as timestamp
    .pyc files before it gets to them.
    """
    loader = interpreter / "lib64/ld-linux-x86-64.so.2"
    libraries = ":".join(
        str(interpreter / path) for path in ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu")
    )
    command = [
        str(loader), "--library-path", libraries, str(interpreter / PYTHON.lstrip("/")),
        "-B", "-m", "compileall", "-q", "-f", "--invalidation-mode", "unchecked-hash",
        "-s", str(directory), "-p", image_path, str(directory),
    ]  # fmt: skip
    environment = {
        "PYTHONHOME": str(interpreter / "usr"),
        "PYTHONHASHSEED": "0",
        "LC_ALL": "C.UTF-8",
    }
    # compileall exits 1 when a file does not compile (templates or test data in some wheels
    # are not Python 3.11); the modules that matter are checked by running the images.
    result = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode not in (0, 1) or not any(directory.rglob("*.pyc")):
        raise BuildError(
            f"compiling {image_path} with the image's Python failed: {result.stderr[-300:]}"
        )


def tree_entries(root: Path, image_path: str) -> Iterator[Entry]:
    """Files, directories and links under `root`, as entries at `image_path` in the image."""
    for directory, subdirectories, files in os.walk(root):
        subdirectories.sort()
        here = Path(directory)
        relative = here.relative_to(root)
        base = PurePosixPath(image_path) / relative.as_posix()
        if relative.parts:
            yield Entry.directory(str(base), 0o755)
        for name in sorted(files) + [d for d in subdirectories if (here / d).is_symlink()]:
            path = here / name
            if path.is_symlink():
                yield Entry.symlink(str(base / name), os.readlink(path))
            else:
                mode = 0o755 if os.access(path, os.X_OK) else 0o644
                yield Entry.file(str(base / name), path.read_bytes(), mode)
