"""The build's pieces that need no network: layers, the lock, what an image leaves out."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from contrast.imagebuild.build import build
from contrast.imagebuild.debian import excluded
from contrast.imagebuild.layer import Entry, write_layer
from contrast.imagebuild.lock import BuildError, Lock, Wheel
from contrast.imagebuild.python import project_wheel


def test_a_layer_is_the_same_bytes_whatever_the_order_of_its_entries() -> None:
    entries = [
        Entry.file("usr/bin/tool", b"x", 0o755),
        Entry.symlink("bin", "usr/bin"),
        Entry.file("etc/passwd", b"root"),
    ]
    first = write_layer(entries, 1)
    second = write_layer(list(reversed(entries)), 1)
    assert first == second
    assert write_layer(entries, 2).digest != first.digest
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(first.blob))) as tar:
        names = tar.getnames()
        assert names == sorted(names)
        assert "usr" in names  # parents are written too
        assert {member.uname for member in tar} == {"root"}


def test_a_changed_byte_changes_the_layer() -> None:
    assert (
        write_layer([Entry.file("a", b"1")], 1).digest
        != write_layer([Entry.file("a", b"2")], 1).digest
    )


@pytest.mark.parametrize(
    ("path", "left_out"),
    [
        ("bin/sh", True),
        ("usr/bin/dpkg", True),
        ("var/lib/dpkg/status", True),
        ("usr/share/doc/libc6/copyright", False),
        ("usr/share/doc/libc6/changelog.Debian.gz", True),
        ("usr/bin/python3.11", False),
        ("usr/share/man/man1/python3.11.1.gz", True),
        ("dev/null", True),
    ],
)
def test_what_an_image_leaves_out(path: str, left_out: bool) -> None:
    assert excluded(path) is left_out


def test_the_lock_round_trips_and_bad_locks_say_how_to_fix_them() -> None:
    lock = Lock(
        debian={"python": {"libc6": "2.36-9"}},
        python={"coordinator": (Wheel("grpcio", "1.0", "grpcio-1.0.whl", "ab" * 32),)},
    )
    assert Lock.from_bytes(lock.to_bytes()) == lock
    with pytest.raises(BuildError) as error:
        Lock.from_bytes(b'{"format": 1}')
    assert "--relock" in error.value.explain()
    with pytest.raises(BuildError, match="format"):
        Lock.from_bytes(b'{"format": 2, "debian": {}, "python": {}}')


def test_a_build_outside_a_checkout_says_where_the_source_must_come_from(tmp_path: Path) -> None:
    lock = Lock(debian={}, python={})
    with pytest.raises(BuildError, match="not a checkout") as error:
        build(tmp_path, tmp_path / "out", lock=lock, cache=tmp_path / "cache", epoch=1)
    assert "--source" in error.value.explain()
    assert not (tmp_path / "out").exists()


def test_the_project_wheel_holds_the_source_and_not_what_an_earlier_build_left(
    tmp_path: Path,
) -> None:
    """setuptools builds in the source's build/: a module deleted since stays in build/lib there."""
    repo = Path(__file__).resolve().parents[2]
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (checkout / name).write_bytes((repo / name).read_bytes())
    (checkout / "src/contrast").mkdir(parents=True)
    (checkout / "src/contrast/__init__.py").write_text('"""A checkout."""\n')
    stale = checkout / "build/lib/contrast/deleted_since.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("LEFT = 'by an earlier build'\n")
    wheel = project_wheel(checkout, tmp_path / "out" / "wheel", epoch=1)
    names = zipfile.ZipFile(wheel).namelist()
    assert "contrast/__init__.py" in names
    assert "contrast/deleted_since.py" not in names
    assert stale.is_file()  # the checkout is read, never written
    assert not (checkout / "src/contrast.egg-info").exists()
