"""The release images: reproducible, minimal, and described by the facts `generate` uses."""

from __future__ import annotations

import gzip
import json
import subprocess
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from contrast.cli.main import main
from contrast.imagebuild.facts import read_back
from contrast.imagebuild.spec import IMAGES
from contrast.kuberesource.releaseimages import release_images, tagged
from tests.imagebuild.builder import BuiltImages, build_into

# No image may hold a way to run arbitrary commands or install more: a shell, a package manager,
# a compiler.
FORBIDDEN = frozenset(
    {"sh", "bash", "dash", "rbash", "zsh", "busybox", "dpkg", "apt", "apt-get", "apt-key",
     "gcc", "cc", "c++", "g++", "ld", "as", "cpp", "pip", "pip3", "make"}
)  # fmt: skip


def _json(layout: Path, digest: str) -> Any:
    return json.loads((layout / "blobs/sha256" / digest.removeprefix("sha256:")).read_bytes())


def _manifest(built: BuiltImages, name: str) -> Any:
    return _json(built.layout, built.digest(name))


def _paths(built: BuiltImages, name: str) -> dict[str, tarfile.TarInfo]:
    members = {}
    for layer in _manifest(built, name)["layers"]:
        blob = built.layout / "blobs/sha256" / layer["digest"].removeprefix("sha256:")
        with tarfile.open(fileobj=gzip.open(blob)) as tar:
            members.update({member.name: member for member in tar})
    return members


def test_two_builds_give_byte_identical_images(built_images: BuiltImages, tmp_path: Path) -> None:
    again = build_into(tmp_path / "again")
    assert [image.digest for image in again.release.images] == [
        image.digest for image in built_images.release.images
    ]
    assert (again.layout / "index.json").read_bytes() == (
        built_images.layout / "index.json"
    ).read_bytes()
    print({image.name: image.digest for image in again.release.images})


def test_the_layout_names_each_image_by_its_release_reference(built_images: BuiltImages) -> None:
    index = json.loads((built_images.layout / "index.json").read_bytes())
    names = {
        entry["annotations"]["org.opencontainers.image.ref.name"] for entry in index["manifests"]
    }
    assert names == {tagged(spec.name) for spec in IMAGES}


@pytest.mark.parametrize("name", [spec.name for spec in IMAGES])
def test_no_shell_no_package_manager_no_compiler(built_images: BuiltImages, name: str) -> None:
    members = _paths(built_images, name)
    found = {
        path
        for path, member in members.items()
        if PurePosixPath(path).name in FORBIDDEN and not member.isdir()
    }
    assert not found
    assert "usr/bin/python3.11" in members
    assert "usr/local/bin/contrast" in members
    assert not any(path.startswith(("var/lib/dpkg/", "etc/apt/", "dev/")) for path in members)
    # Reproducible: one time and one owner for every entry.
    assert {(m.mtime, m.uid, m.gid) for m in members.values()} == {(1700000000, 0, 0)}


def test_only_the_proxy_holds_envoy_and_iptables(built_images: BuiltImages) -> None:
    for spec in IMAGES:
        members = _paths(built_images, spec.name)
        proxy = spec.name == "service-mesh-proxy"
        assert ("usr/local/bin/envoy" in members) == proxy
        assert ("usr/sbin/iptables-restore" in members) == proxy
        # The CLI's heavy dependencies stay out of every image.
        assert not any("kubernetes_validate" in path for path in members)
        assert ("usr/local/lib/python3.11/dist-packages/kubernetes/__init__.py" in members) == (
            spec.name == "coordinator"
        )


def test_every_module_is_compiled_ahead(built_images: BuiltImages) -> None:
    members = _paths(built_images, "coordinator")
    package = "usr/local/lib/python3.11/dist-packages/contrast"
    sources = [p for p in members if p.startswith(package) and p.endswith(".py")]
    assert sources
    for source in sources:
        path = PurePosixPath(source)
        compiled = path.parent / "__pycache__" / f"{path.stem}.cpython-311.pyc"
        assert str(compiled) in members, source


def test_the_recorded_facts_are_the_built_images_facts(built_images: BuiltImages) -> None:
    """The package data `generate` reads equals what the generic image reader finds in the build.

    When this fails after a change to the image specs, rerun
    `contrast-build-images --output DIR --update-facts` and commit the record.
    """
    assert read_back(built_images.layout, with_digests=False) == release_images()


def test_configs_say_what_runs(built_images: BuiltImages) -> None:
    for spec in IMAGES:
        config = _json(built_images.layout, _manifest(built_images, spec.name)["config"]["digest"])
        assert config["config"]["Entrypoint"] == ["/usr/local/bin/contrast"]
        assert config["config"]["Cmd"] == list(spec.cmd)
        assert config["config"]["User"] == "0:0"
        assert config["created"] == "2023-11-14T22:13:20Z"
        assert len(config["rootfs"]["diff_ids"]) == len(
            _manifest(built_images, spec.name)["layers"]
        )


def test_a_release_record_names_each_image_by_the_digest_the_build_made(
    built_images: BuiltImages,
) -> None:
    record = read_back(built_images.layout, with_digests=True)
    for spec in IMAGES:
        image = record[spec.name]
        assert image.digest == built_images.digest(spec.name)
        assert image.reference == f"{tagged(spec.name)}@{image.digest}"


def test_umoci_unpacks_the_layout_into_a_runtime_bundle(
    built_images: BuiltImages, tmp_path: Path
) -> None:
    """A second, independent reader of the layout: umoci (Debian) makes a runc bundle of it."""
    bundle = tmp_path / "bundle"
    subprocess.run(
        ["umoci", "unpack", "--image", f"{built_images.layout}:{tagged('coordinator')}",
         str(bundle)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    config = json.loads((bundle / "config.json").read_bytes())
    assert config["process"]["args"] == ["/usr/local/bin/contrast", "coordinator"]
    assert config["process"]["cwd"] == "/"
    assert (config["process"]["user"]["uid"], config["process"]["user"]["gid"]) == (0, 0)
    assert (
        (bundle / "rootfs/usr/local/bin/contrast").read_bytes().startswith(b"#!/usr/bin/python3.11")
    )
    assert not (bundle / "rootfs/bin/sh").exists()


def test_generate_on_the_built_layout_gives_the_policies_of_the_record(
    built_images: BuiltImages, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --oci-layout, generate reads the release images themselves: same policies."""
    assert main(["coordinator-resources", "--platform", "emulated-snp"]) == 0
    coordinator = capsys.readouterr().out
    hashes = []
    for name, extra in (("record", []), ("layout", ["--oci-layout", str(built_images.layout)])):
        workspace = tmp_path / name
        (workspace / "resources").mkdir(parents=True)
        (workspace / "resources/coordinator.yaml").write_text(coordinator)
        arguments = ["generate", "--workspace-dir", str(workspace), "--reference-values",
                     "emulated-snp", "--emulated-tee", str(tmp_path / "tee"), *extra,
                     str(workspace / "resources")]  # fmt: skip
        assert main(arguments) == 0, capsys.readouterr().err
        manifest = json.loads((workspace / "manifest.json").read_bytes())
        hashes.append(manifest["Policies"])
    capsys.readouterr()
    assert hashes[0] == hashes[1]
    assert hashes[0]
    # The second run really read the images: their layers are in its layer cache, not the first's.
    config = _json(built_images.layout, _manifest(built_images, "coordinator")["config"]["digest"])
    layers = config["rootfs"]["diff_ids"]
    assert any(layer in (tmp_path / "layout/layers-cache.json").read_text() for layer in layers)
    cache = tmp_path / "record/layers-cache.json"
    assert not cache.exists() or not any(layer in cache.read_text() for layer in layers)
