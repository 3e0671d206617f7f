"""The Initializer's image carries what `secure-pv` runs, and it works there.

`initializer/cryptsetup.py` runs `cryptsetup`, `blkid`, `mkfs.ext4` and `mount` as programs (as
the original's Initializer does); the image gets them from Debian (cryptsetup-bin, util-linux,
e2fsprogs, mount), locked like every other package. Here the image is pushed to a loopback
registry, pulled by digest into a containerd of the test's own and each tool runs in a container
of it with runc, on a file image in a bind-mounted directory: formatting LUKS2 (without
integrity, which needs device-mapper, absent from this kernel), the keyslot opened with the right
key file and refused with another, ext4 made and recognised. Opening and mounting need
device-mapper and `CAP_SYS_ADMIN` in a VM, which no container here has.
"""

from __future__ import annotations

import gzip
import json
import secrets
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from contrast.imagebuild.spec import IMAGES
from contrast.local.runners import ContainerRunner
from tests.imagebuild.builder import BuiltImages

TOOLS = ("cryptsetup", "blkid", "mkfs.ext4", "mount")


def _members(built: BuiltImages, name: str) -> dict[str, tarfile.TarInfo]:
    blobs = built.layout / "blobs/sha256"
    manifest = json.loads((blobs / built.digest(name).removeprefix("sha256:")).read_bytes())
    members = {}
    for layer in manifest["layers"]:
        blob = blobs / layer["digest"].removeprefix("sha256:")
        with tarfile.open(fileobj=gzip.open(blob)) as tar:
            members.update({member.name: member for member in tar})
    return members


def _tools(members: dict[str, tarfile.TarInfo]) -> set[str]:
    found = set()
    for path, member in members.items():
        parts = PurePosixPath(path)
        in_path = str(parts.parent) in ("sbin", "bin", "usr/sbin", "usr/bin")
        if in_path and parts.name in TOOLS and not member.isdir():
            found.add(parts.name)
    return found


def test_only_the_initializer_carries_the_secure_pv_tools(built_images: BuiltImages) -> None:
    for spec in IMAGES:
        tools = _tools(_members(built_images, spec.name))
        assert tools == (set(TOOLS) if spec.name == "initializer" else set()), spec.name


@pytest.fixture(scope="module")
def initializer(
    built_images: BuiltImages, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ContainerRunner, Path]]:
    work = tmp_path_factory.mktemp("initializer-tools")
    runner = ContainerRunner(built_images.layout, work)
    try:
        runner.prepare(("initializer",))
        yield runner, work
    finally:
        runner.stop_all()


# Container IDs of this run: the runc shim keeps its state under /run/containerd/runc/<namespace>
# for every containerd on the host, so a container a killed earlier run left there under the same
# name made `ctr run` fail with "container with given ID already exists".
RUN = secrets.token_hex(4)


def _run(runner: ContainerRunner, work: Path, name: str, *arguments: str) -> tuple[int, str]:
    result = runner.containerd.run_to_completion(
        f"{name}-{RUN}", runner.references["initializer"], list(arguments), mounts=[work],
        timeout=120,
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (("cryptsetup", "--version"), "cryptsetup 2.6.1"),
        (("blkid", "--version"), "blkid from util-linux 2.38.1"),
        (("mkfs.ext4", "-V"), "mke2fs 1.47.0"),
        (("mount", "--version"), "mount from util-linux 2.38.1"),
    ],
    ids=TOOLS,
)
def test_each_tool_runs_in_a_container_of_the_image(
    initializer: tuple[ContainerRunner, Path], arguments: tuple[str, ...], expected: str
) -> None:
    runner, work = initializer
    code, output = _run(runner, work, f"version-{arguments[0]}", *arguments)
    assert code == 0, output
    assert expected in output


def test_the_tools_do_their_work_in_the_image(initializer: tuple[ContainerRunner, Path]) -> None:
    runner, work = initializer
    volume, key, other = work / "volume.img", work / "key", work / "other-key"
    with volume.open("wb") as file:
        file.truncate(32 << 20)
    key.write_bytes(b"a" * 64)
    other.write_bytes(b"b" * 64)
    code, output = _run(
        runner, work, "luks-format", "cryptsetup", "luksFormat", "--type=luks2",
        "--cipher=aes-xts-plain64", "--pbkdf=argon2id", "--pbkdf-memory=10240",
        "--sector-size=4096", "--batch-mode", f"--key-file={key}", str(volume),
    )  # fmt: skip
    assert code == 0, output
    assert volume.read_bytes()[:8] == b"LUKS\xba\xbe\x00\x02"
    code, output = _run(runner, work, "luks-test", "cryptsetup", "open", "--test-passphrase",
                        f"--key-file={key}", str(volume))  # fmt: skip
    assert code == 0, output
    code, output = _run(runner, work, "luks-refused", "cryptsetup", "open", "--test-passphrase",
                        f"--key-file={other}", str(volume))  # fmt: skip
    assert code == 2, output  # cryptsetup's "no key available with this passphrase"

    filesystem = work / "filesystem.img"
    with filesystem.open("wb") as file:
        file.truncate(16 << 20)
    code, output = _run(runner, work, "mkfs", "mkfs.ext4", "-q", "-F", str(filesystem))
    assert code == 0, output
    code, output = _run(runner, work, "blkid", "blkid", "-o", "value", "-s", "TYPE",
                        str(filesystem))  # fmt: skip
    assert (code, output.strip()) == (0, "ext4")
