"""`contrast runtime build` on hostile releases: nothing is written outside the output, nothing is
read from outside the release, and no tarball takes more memory, disk or time than its bounds.

Each test is an attack that succeeded before (issue 24, items 1-3): CPython's CVE-2025-4517 chain
wrote a file at an absolute path through tarfile's `data` filter; a directory release's symlinks
copied host files into the payload and `runtime.json`; a tarball's skipped members each kept a
header in memory, and a zstd bomb was unpacked to disk whole.
"""

from __future__ import annotations

import io
import os
import resource
import tarfile
import tracemalloc
from pathlib import Path, PurePosixPath

import pytest
import zstandard

from contrast.kata import layout
from contrast.kata.archive import open_release
from contrast.kata.errors import KataReleaseError
from contrast.kata.unpack import Bounds
from tests.kata import hostile, synthetic
from tests.kata.conftest import build

SECRET = b"root:$6$not-for-a-payload:19000:0:99999:7:::\n"


def _files_below(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


# Item 1: the release tarball writes anywhere.


def test_cve_2025_4517_chain_writes_nothing_outside_the_output(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "written-by-the-release"
    members = [*hostile.release_members(), *hostile.escape_chain(workspace, target)]
    tarball = hostile.write(members, tmp_path / "kata-static.tar.zst")
    with pytest.raises(KataReleaseError) as raised:
        build(tarball, "metal-qemu-snp", workspace, max_vcpus=1)
    assert not target.exists()
    assert list(workspace.iterdir()) == []
    message = raised.value.explain()
    # The first member the chain needs that a release never has: a link that is not a sibling.
    assert "opt/kata/bin/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/llll" in message
    assert "symlink" in message


def _tarball(tmp_path: Path, *extra: hostile.Member, name: str = "release.tar.zst") -> Path:
    return hostile.write([*hostile.release_members(), *extra], tmp_path / name)


HOSTILE_MEMBERS = {
    "absolute name": (hostile.regular("/opt/kata/bin/evil", b"x"), "/opt/kata/bin/evil"),
    "dot-dot": (hostile.regular("./opt/kata/bin/../../../evil", b"x"), "is not below"),
    "absolute link": (hostile.symlink(f"{hostile.BIN}/kata-x", "/etc/shadow"), "symlink"),
    "climbing link": (hostile.symlink(f"{hostile.BIN}/kata-x", "../../../etc"), "symlink"),
    "link to a subdirectory": (hostile.symlink(f"{hostile.BIN}/x", "sub/y"), "symlink"),
    "through a link": (hostile.regular(f"{hostile.BIN}/kata-runtime/x", b"x"), "kata-runtime"),
    "twice": (hostile.regular(f"{hostile.BIN}/kata-runtime", b"x"), "twice"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_MEMBERS))
def test_a_member_a_release_never_has_is_named_and_nothing_is_left(
    case: str, tmp_path: Path
) -> None:
    member, named = HOSTILE_MEMBERS[case]
    tarball = _tarball(tmp_path, member)
    workspace = tmp_path / "workspace"
    with pytest.raises(KataReleaseError) as raised:
        build(tarball, "metal-qemu-snp", workspace, max_vcpus=1)
    assert named in raised.value.explain()
    assert list(workspace.iterdir()) == []
    assert not (tmp_path / "evil").exists()


@pytest.mark.parametrize(
    ("kind", "named"),
    [
        (tarfile.LNKTYPE, "hard link"),
        (tarfile.FIFOTYPE, "FIFO"),
        (tarfile.CHRTYPE, "character device"),
    ],
)
def test_members_other_than_files_directories_and_sibling_links_are_refused(
    kind: bytes, named: str, tmp_path: Path
) -> None:
    info = tarfile.TarInfo(f"{hostile.BIN}/special")
    info.type, info.linkname = kind, "./opt/kata/VERSION"
    tarball = _tarball(tmp_path, (info, None))
    with pytest.raises(KataReleaseError, match=f"opt/kata/bin/special is a {named}"):
        build(tarball, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=1)
    # The same member outside what a runtime uses is left in the archive, unread.
    info.name = "./opt/kata/libexec/special"
    tarball = _tarball(tmp_path, (info, None), name="skipped.tar.zst")
    build(tarball, "metal-qemu-snp", tmp_path / "other", max_vcpus=1)


# Item 2: a directory release follows symlinks out of its tree.


@pytest.mark.parametrize(
    ("member", "link"),
    [
        ("bin/containerd-shim-kata-v2", "absolute"),
        ("bin/containerd-shim-kata-v2", "relative"),
        ("VERSION", "absolute"),
        ("share/kata-qemu-snp-experimental/kvmvapic.bin", "relative"),
    ],
)
def test_a_directory_release_s_link_out_of_its_tree_is_refused(
    member: str, link: str, release: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    path = release / "opt/kata" / member
    path.unlink()
    depth = len(Path("opt/kata", member).parts) - 1
    path.symlink_to(secret if link == "absolute" else Path(*[".."] * (depth + 1), "secret"))
    workspace = tmp_path / "workspace"
    with pytest.raises(KataReleaseError, match="links outside the release") as raised:
        build(release, "metal-qemu-snp", workspace, max_vcpus=1)
    assert member in raised.value.explain()
    assert not workspace.exists()


def test_a_directory_release_s_directory_link_out_of_its_tree_is_refused(
    release: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    (release / "opt/kata/bin").rename(elsewhere)
    (release / "opt/kata/bin").symlink_to(elsewhere)
    with pytest.raises(KataReleaseError, match="opt/kata/bin links outside the release"):
        build(release, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=1)


def test_links_inside_a_directory_release_are_followed(release: Path, tmp_path: Path) -> None:
    """The release's own links (`vmlinuz-confidential.container -> vmlinuz-...`) and any other
    link that stays in the tree still work."""
    shim = release / "opt/kata/bin/containerd-shim-kata-v2"
    moved = release / "opt/kata/libexec/shim"
    shim.rename(moved)
    shim.symlink_to("../libexec/shim")
    built = build(release, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=1)
    copied = built.payload / "bin/containerd-shim-contrast-cc-v2"
    assert copied.read_bytes() == moved.read_bytes()


@pytest.mark.parametrize(
    "member", ["VERSION", "bin/containerd-shim-kata-v2", "share/kata-qemu-snp-experimental/x"]
)
def test_a_directory_release_s_fifo_is_refused_without_blocking(
    member: str, release: Path, tmp_path: Path
) -> None:
    path = release / "opt/kata" / member
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    with pytest.raises(KataReleaseError, match=f"opt/kata/{member} is not a regular file"):
        build(release, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=1)


# Item 3: no bounds.


def _peak_unpacking(tarball: Path, scratch: Path) -> int:
    tracemalloc.start()
    try:
        with open_release(tarball, scratch) as kata:
            assert kata.version == synthetic.VERSION
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_skipped_members(tmp_path: Path) -> None:
    """tarfile keeps every header it reads in `TarFile.members` unless they are cleared, and a
    PurePosixPath of each name grew the interpreter's table of interned names: 20 000 skipped
    members peaked at 11.4 MB before, 2 000 at 1.1 MB (4 M: 1.9 GB)."""
    few = hostile.write(hostile.many_members(2_000), tmp_path / "few.tar.zst")
    many = hostile.write(hostile.many_members(20_000), tmp_path / "many.tar.zst")
    baseline = _peak_unpacking(few, tmp_path / "scratch")
    peak = _peak_unpacking(many, tmp_path / "scratch")
    assert peak < baseline + (256 << 10), f"{baseline} bytes at 2 000 members, {peak} at 20 000"
    assert peak < 2 << 20


def test_the_member_count_is_bounded(tmp_path: Path) -> None:
    tarball = hostile.write(hostile.many_members(2_000), tmp_path / "many.tar.zst")
    with (
        pytest.raises(KataReleaseError, match="more than 1000 members"),
        open_release(tarball, tmp_path / "scratch", Bounds(members=1_000)),
    ):
        pass
    assert list((tmp_path / "scratch").iterdir()) == []
    with open_release(tarball, tmp_path / "scratch", Bounds(members=3_000)) as kata:
        assert kata.version == synthetic.VERSION


def test_a_zstd_bomb_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """1 GiB of zeros in 33 KB: more than the default bound of 100 times the compressed size."""
    name = "./opt/kata/share/kata-containers/bomb.img"
    tarball = hostile.zstd_bomb(tmp_path / "bomb.tar.zst", name, 1 << 30)
    assert tarball.stat().st_size < 100_000
    workspace = tmp_path / "workspace"
    with pytest.raises(KataReleaseError, match=r"bomb\.img") as raised:
        build(tarball, "metal-qemu-snp", workspace, max_vcpus=1)
    assert "100 times" in raised.value.explain()
    assert list(workspace.iterdir()) == []


def test_file_and_total_sizes_are_bounded(tmp_path: Path) -> None:
    big = hostile.regular("./opt/kata/share/kata-containers/big.img", bytes(300_000))
    tarball = _tarball(tmp_path, big)
    with (
        pytest.raises(KataReleaseError, match=r"big\.img .* more than the 200000 bytes"),
        open_release(tarball, tmp_path / "a", Bounds(file_size=200_000)),
    ):
        pass
    total = 300_000 + sum(len(c) for c in synthetic.files().values() if isinstance(c, bytes))
    with (
        pytest.raises(KataReleaseError, match=f"more than {total - 1} bytes in all"),
        open_release(tarball, tmp_path / "b", Bounds(total_size=total - 1)),
    ):
        pass
    assert list((tmp_path / "b").iterdir()) == []
    bounds = Bounds(file_size=300_000, total_size=total)
    with open_release(tarball, tmp_path / "c", bounds) as kata:
        assert kata.version == synthetic.VERSION


def test_a_huge_extended_header_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A pax header is read whole into memory by tarfile: its size is bounded first."""
    info = tarfile.TarInfo(f"{hostile.BIN}/x")
    info.pax_headers = {"comment": "x" * (2 << 20)}
    tarball = _tarball(tmp_path, (info, b""))
    with pytest.raises(KataReleaseError, match="extended header of 2097"):
        build(tarball, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=1)


def _release_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, content in hostile.release_members():
            archive.addfile(info, None if content is None else io.BytesIO(content))
    return buffer.getvalue()


def test_a_decompressor_window_beyond_the_bound_is_refused(tmp_path: Path) -> None:
    """xz and zstd headers name the window the decoder allocates: 1 GiB here, for a
    release of some 100 KB; at most 128 MiB is granted."""
    raw = _release_tar()
    xz = tmp_path / "release.tar.xz"
    xz.write_bytes(hostile.xz_asking_for(raw, 36))
    params = zstandard.ZstdCompressionParameters(window_log=30, write_content_size=False)
    compressor = zstandard.ZstdCompressor(compression_params=params)
    zst = tmp_path / "release.tar.zst"
    with zst.open("wb") as file, compressor.stream_writer(file) as writer:
        writer.write(raw)
    for tarball, message in ((xz, "Memory usage limit"), (zst, "too much memory")):
        with pytest.raises(KataReleaseError, match=message):
            build(tarball, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=1)
        assert list((tmp_path / "workspace").iterdir()) == []
        with open_release(tarball, tmp_path / "scratch", Bounds(decompressor_memory=2 << 30)):
            pass


def test_a_tarball_of_several_zstd_frames_is_read_whole(tmp_path: Path) -> None:
    """pzstd writes several frames: each is read (python-zstandard's stream reader goes on to the
    next frame after a short read, with or without `read_across_frames`)."""
    raw = _release_tar()
    half = len(raw) // 2
    compressor = zstandard.ZstdCompressor()
    tarball = tmp_path / "release.tar.zst"
    tarball.write_bytes(compressor.compress(raw[:half]) + compressor.compress(raw[half:]))
    with open_release(tarball, tmp_path / "scratch") as kata:
        for name, content in synthetic.files().items():
            if isinstance(content, bytes) and layout.is_needed(name):
                file = kata.find(PurePosixPath(name))
                assert file is not None, name
                assert file.read() == content


def test_running_out_of_descriptors_is_one_error(release: Path, tmp_path: Path) -> None:
    """Every release file stays open until the build ends; a QEMU data directory of more files
    than descriptors is refused with the file it reached, not an OSError."""
    data = release / "opt/kata/share/kata-qemu-snp-experimental/many"
    data.mkdir()
    for index in range(200):
        (data / f"{index:03d}.bin").write_bytes(b"")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (100, hard))
    try:
        with pytest.raises(KataReleaseError, match=r"cannot read .*many/\d+\.bin: Too many"):
            build(release, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=1)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_build_closes_every_descriptor_it_opened(release: Path, tmp_path: Path) -> None:
    tarball = synthetic.tarball(synthetic.files(), tmp_path / "release.tar.zst", "zst")
    before = sorted(os.listdir("/proc/self/fd"))
    build(release, "metal-qemu-snp", tmp_path / "a", max_vcpus=1)
    build(tarball, "metal-qemu-tdx", tmp_path / "b")
    with pytest.raises(KataReleaseError):
        build(release, "metal-qemu-snp-gpu", tmp_path / "c")
    assert sorted(os.listdir("/proc/self/fd")) == before
