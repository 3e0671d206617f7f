"""`runtime build --node-installer-layout`: the node-installer image with the payload, by digest.

The fast tests add the payload to a small stand-in image (one layer, the node-installer's config)
written by the project's own layout writer; the last ones take the release images built from this
checkout (`built_images`), push the result to Debian's docker-registry with the exact `skopeo`
command the CLI prints, pull it by the digest the DaemonSet names and run the DaemonSet's exact
installer command under containerd with the host root bind-mounted at /host.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from contrast.cli.main import main
from contrast.imagebuild import payloadimage
from contrast.imagebuild.layer import Entry
from contrast.imagebuild.oci import LayoutWriter
from contrast.imagebuild.spec import IMAGES
from contrast.images.manifest import DOCKER_MANIFEST, OCI_INDEX
from contrast.kuberesource.release import INSTALLER_COMMAND, TARGET_CONFIG_DIR
from contrast.kuberesource.releaseimages import tagged
from contrast.local.containers import Containerd, Registry
from contrast.runtimedescription.shipped import load_payload
from tests.imagebuild.builder import BuiltImages
from tests.images.conftest import stop
from tests.kata import synthetic
from tests.kata.test_install import cri_config, host_config, running_containerd
from tests.nodeinstaller.conftest import snapshot

PLATFORM = "metal-qemu-snp"
REPOSITORY = "registry.example.com/contrast/node-installer"
IMAGE_DIRECTORY = "usr/share/contrast/runtimes"


@dataclass(frozen=True)
class Built:
    """One `contrast runtime build` run with an image: its workspace, output and YAML."""

    workspace: Path
    out: str
    handler: str
    image: str  # what the DaemonSet names
    installer: dict[str, Any]  # the DaemonSet's init container

    @property
    def layout(self) -> Path:
        return self.workspace / f"node-installer-{PLATFORM}"

    @property
    def payload(self) -> Path:
        return self.workspace / "runtimes" / self.handler

    @property
    def digest(self) -> str:
        return self.image.rpartition("@")[2]

    def push_command(self) -> list[str]:
        line = next(x for x in self.out.splitlines() if x.strip().startswith("push:"))
        return shlex.split(line.partition("push:")[2])


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ctd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def base_layout(tmp_path: Path) -> Path:
    """A small image under the node-installer's name and config, as the release build writes it."""
    layout = tmp_path / "base"
    spec = next(spec for spec in IMAGES if spec.name == "node-installer")
    writer = LayoutWriter(layout)
    layer = writer.layer([Entry.file("usr/bin/contrast", b"#!/bin/false\n", 0o755)], 1700000000)
    writer.image(spec, [layer], epoch=1700000000)
    writer.finish()
    return layout


def run_build(
    release: Path,
    workspace: Path,
    layout: Path,
    capsys: pytest.CaptureFixture[str],
    repository: str = REPOSITORY,
) -> Built:
    argv = ["runtime", "build", "--kata-release", str(release), "--platform", PLATFORM,
            "--output", str(workspace), "--max-vcpus", "1",
            "--node-installer-layout", str(layout), "--image-repository", repository]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    documents = list(yaml.safe_load_all((workspace / f"runtime-{PLATFORM}.yml").read_text()))
    daemonset = next(d for d in documents if d["kind"] == "DaemonSet")
    installer = daemonset["spec"]["template"]["spec"]["initContainers"][0]
    handler = next(d for d in documents if d["kind"] == "RuntimeClass")["handler"]
    return Built(workspace, out, handler, installer["image"], installer)


def blob(layout: Path, digest: str) -> bytes:
    data = (layout / "blobs/sha256" / digest.removeprefix("sha256:")).read_bytes()
    assert hashlib.sha256(data).hexdigest() == digest.removeprefix("sha256:")
    return data


def manifest_of(layout: Path, name: str) -> dict[str, Any]:
    index = json.loads((layout / "index.json").read_text())
    (entry,) = [
        e for e in index["manifests"]
        if e["annotations"]["org.opencontainers.image.ref.name"] == name
    ]  # fmt: skip
    document: dict[str, Any] = json.loads(blob(layout, entry["digest"]))
    return document


def layout_files(layout: Path) -> dict[str, bytes]:
    return {str(p.relative_to(layout)): p.read_bytes() for p in layout.rglob("*") if p.is_file()}


def test_two_builds_give_one_digest_on_the_node_installer_image(
    release: Path, base_layout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_build(release, tmp_path / "one", base_layout, capsys)
    second = run_build(release, tmp_path / "two", base_layout, capsys)
    assert first.handler == second.handler
    assert first.image == second.image
    assert first.image == f"{REPOSITORY}@{first.digest}"
    # Byte for byte, the whole layout: blobs, index.json, oci-layout.
    assert layout_files(first.layout) == layout_files(second.layout)
    # Rebuilding into the same workspace replaces the layout with the same one.
    again = run_build(release, tmp_path / "one", base_layout, capsys)
    assert again.image == first.image
    assert layout_files(again.layout) == layout_files(second.layout)

    name = f"{REPOSITORY}:{first.handler}"
    manifest = manifest_of(first.layout, name)
    assert f"sha256:{hashlib.sha256(blob(first.layout, first.digest)).hexdigest()}" == first.digest
    base = manifest_of(base_layout, tagged("node-installer"))
    # The base image's layers, then one more; its config is the base's with one diff_id more.
    assert manifest["layers"][:-1] == base["layers"]
    assert len(manifest["layers"]) == len(base["layers"]) + 1
    config = json.loads(blob(first.layout, manifest["config"]["digest"]))
    base_config = json.loads(blob(base_layout, base["config"]["digest"]))
    assert config["config"] == base_config["config"]
    assert config["config"]["Entrypoint"] == base_config["config"]["Entrypoint"]
    assert config["created"] == base_config["created"]
    assert config["rootfs"]["diff_ids"][:-1] == base_config["rootfs"]["diff_ids"]
    layer = blob(first.layout, manifest["layers"][-1]["digest"])
    assert config["rootfs"]["diff_ids"][-1] == f"sha256:{hashlib.sha256(gzip.decompress(layer)).hexdigest()}"  # fmt: skip  # noqa: E501


def test_the_layer_holds_exactly_the_payload_files_with_their_pinned_digests(
    release: Path, base_layout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built = run_build(release, tmp_path / "workspace", base_layout, capsys)
    manifest = manifest_of(built.layout, f"{REPOSITORY}:{built.handler}")
    layer = blob(built.layout, manifest["layers"][-1]["digest"])
    prefix = f"{IMAGE_DIRECTORY}/{built.handler}/"
    files: dict[str, tuple[bytes, int]] = {}
    with tarfile.open(fileobj=io.BytesIO(layer), mode="r:gz") as archive:
        members = archive.getmembers()
        for member in members:
            assert (member.mtime, member.uid, member.gid) == (payloadimage.EPOCH, 0, 0)
            assert member.isdir() or member.isfile(), member.name
            if member.isfile():
                assert member.name.startswith(prefix), member.name
                data = archive.extractfile(member)
                assert data is not None
                files[member.name.removeprefix(prefix)] = (data.read(), member.mode)
            else:
                assert prefix.startswith(member.name + "/") or member.name.startswith(prefix)
    assert [m.name for m in members] == sorted(m.name for m in members)
    description = load_payload(built.payload)
    pinned = {str(a.relative_path): a for a in description.artefacts}
    assert sorted(files) == sorted([*pinned, "runtime.json"])
    assert files["runtime.json"][0] == (built.payload / "runtime.json").read_bytes()
    for relative, artefact in pinned.items():
        data, mode = files[relative]
        assert hashlib.sha256(data).hexdigest() == artefact.sha256, relative
        assert len(data) == artefact.size, relative
        assert mode == (0o755 if artefact.executable else 0o644), relative
        assert data == (built.payload / relative).read_bytes()


def test_the_daemonset_runs_the_installer_from_the_image_by_digest(
    release: Path, base_layout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built = run_build(release, tmp_path / "workspace", base_layout, capsys)
    assert built.image == f"{REPOSITORY}@{built.digest}"
    command = built.installer["command"]
    assert command[: len(INSTALLER_COMMAND)] == list(INSTALLER_COMMAND)
    assert command[command.index("--payload") + 1] == f"/{IMAGE_DIRECTORY}/{built.handler}"
    assert command[command.index("--target-config") + 1] == TARGET_CONFIG_DIR
    assert f"image:            {built.image} in {built.layout}" in built.out
    assert built.push_command() == [
        "skopeo", "copy", "--preserve-digests",
        f"oci:{built.layout}:{REPOSITORY}:{built.handler}",
        f"docker://{REPOSITORY}:{built.handler}",
    ]  # fmt: skip


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("contrast: "), captured.err
    return lines[0]


def test_a_layout_without_the_node_installer_image_writes_nothing(
    release: Path, base_layout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = tmp_path / "workspace"
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "other"
    writer = LayoutWriter(other)
    spec = next(spec for spec in IMAGES if spec.name == "coordinator")
    writer.image(spec, [writer.layer([Entry.file("a", b"a")], 1)], epoch=1)
    writer.finish()
    corrupt = tmp_path / "corrupt"
    shutil.copytree(base_layout, corrupt)
    layer_digest = manifest_of(corrupt, tagged("node-installer"))["layers"][0]
    layer_file = corrupt / "blobs/sha256" / layer_digest["digest"].removeprefix("sha256:")
    layer_file.write_bytes(layer_file.read_bytes()[:-1] + bytes([layer_file.read_bytes()[-1] ^ 1]))
    not_json = tmp_path / "not-json"
    shutil.copytree(base_layout, not_json)
    (not_json / "index.json").write_text("{")
    argv = ["runtime", "build", "--kata-release", str(release), "--platform", PLATFORM,
            "--output", str(workspace), "--max-vcpus", "1"]  # fmt: skip
    with_repository = ["--image-repository", REPOSITORY]
    cases = {
        empty: "is not an OCI image layout: oci-layout is missing",
        tmp_path / "absent": "is not an OCI image layout",
        release: "is not an OCI image layout",
        other: "has no image ghcr.io/contrast-python/node-installer:",
        corrupt: f"layer {layer_digest['digest']} does not match its digest",
        not_json: "index.json",
    }
    for layout, message in cases.items():
        line = refused([*argv, "--node-installer-layout", str(layout), *with_repository], capsys)
        assert message in line, line
        assert not workspace.exists()
    line = refused([*argv, "--node-installer-layout", str(base_layout)], capsys)
    assert "--node-installer-layout needs --image-repository REPO" in line
    for repository in (f"{REPOSITORY}:1", f"{REPOSITORY}@sha256:{'0' * 64}", "Not A Repo"):
        line = refused(
            [*argv, "--node-installer-layout", str(base_layout), "--image-repository", repository],
            capsys,
        )
        assert "--image-repository" in line
    line = refused([*argv, "--payload-image", "x", "--node-installer-layout", str(base_layout),
                    *with_repository], capsys)  # fmt: skip
    assert "exclude each other" in line
    assert "for --node-installer-layout" in refused([*argv, *with_repository], capsys)
    assert not workspace.exists()


# The real image, pushed, pulled by digest and run under containerd.


@pytest.fixture
def cluster_parts(tmp_path: Path) -> Iterator[tuple[Registry, Containerd]]:
    registry = Registry(tmp_path / "registry")
    runner = Containerd(tmp_path / "containerd")
    registry.start()
    try:
        runner.start()
        try:
            yield registry, runner
        finally:
            runner.stop()
    finally:
        registry.stop()


def push(command: list[str]) -> None:
    """The printed skopeo command; the test registry speaks plain HTTP."""
    assert command[:2] == ["skopeo", "copy"]
    subprocess.run([*command[:2], "--quiet", "--dest-tls-verify=false", *command[2:]],
                   check=True, capture_output=True, timeout=300)  # fmt: skip


def run_installer(
    runner: Containerd, built: Built, name: str, host: Path, target_config: Path
) -> subprocess.CompletedProcess[str]:
    """The DaemonSet's init container: its image by digest, command and env, /host, the config."""
    runner.pull(built.image)
    mounts = [
        f"--mount=type=bind,src={host},dst=/host,options=rbind:rw",
        f"--mount=type=bind,src={target_config},dst={TARGET_CONFIG_DIR},options=rbind:ro",
    ]
    env = [f"--env={item['name']}={item['value']}" for item in built.installer.get("env", [])]
    command = runner.command("run", "--net-host", *mounts, *env, built.image, name,
                             *built.installer["command"])  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def node(tmp_path: Path, short_dir: Path) -> tuple[Path, Path]:
    """A host root with containerd's config, and a target config that never restarts."""
    host = tmp_path / "host"
    config = host / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(host_config(short_dir))
    target = tmp_path / "target-config"
    target.mkdir()
    (target / "systemd-unit-name").write_text("")
    return host, target


def test_the_payload_image_installs_the_runtime_and_containerd_lists_it(  # noqa: PLR0917 (fixtures)
    release: Path,
    built_images: BuiltImages,
    cluster_parts: tuple[Registry, Containerd],
    tmp_path: Path,
    short_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry, runner = cluster_parts
    repository = f"{registry.host}/payload/node-installer"
    built = run_build(release, tmp_path / "workspace", built_images.layout, capsys, repository)
    assert f"(node-installer {built_images.digest('node-installer')} + payload layer)" in built.out
    push(built.push_command())
    host, target = node(tmp_path, short_dir)
    result = run_installer(runner, built, "payload-installer", host, target)
    assert result.returncode == 0, result.stderr
    prefix = f"/opt/edgeless/{built.handler}"
    assert f"runtime {built.handler} in {prefix}" in result.stdout
    shim = host / prefix.lstrip("/") / "bin/containerd-shim-contrast-cc-v2"
    assert shim.read_bytes() == synthetic.files()["bin/containerd-shim-kata-v2"]
    for artefact in load_payload(built.payload).artefacts:
        relative = str(artefact.relative_path)
        installed = host / prefix.lstrip("/") / relative
        assert installed.read_bytes() == (built.payload / relative).read_bytes(), relative
    socket = short_dir / "containerd.sock"
    process = running_containerd(host / "etc/containerd/config.toml", socket, tmp_path / "ctd.log")
    try:
        listed = cri_config(socket)["containerd"]["runtimes"]
    finally:
        stop(process)
    assert listed[built.handler]["runtimePath"] == f"{prefix}/bin/containerd-shim-contrast-cc-v2"


def test_a_changed_byte_in_the_image_installs_nothing_and_names_the_file(  # noqa: PLR0917 (fixtures)
    release: Path,
    built_images: BuiltImages,
    cluster_parts: tuple[Registry, Containerd],
    tmp_path: Path,
    short_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry, runner = cluster_parts
    repository = f"{registry.host}/payload/node-installer"
    built = run_build(release, tmp_path / "workspace", built_images.layout, capsys, repository)
    # The same payload with one byte of the firmware changed and runtime.json as it was, written
    # into the image as the build writes it.
    tampered = tmp_path / "tampered" / built.handler
    shutil.copytree(built.payload, tampered)
    firmware = tampered / "share/ovmf/AMDSEV.fd"
    data = bytearray(firmware.read_bytes())
    data[len(data) // 2] ^= 0x01
    firmware.write_bytes(bytes(data))
    assert (tampered / "runtime.json").read_bytes() == (built.payload / "runtime.json").read_bytes()
    image = payloadimage.write_payload_image(
        payloadimage.read_base(built_images.layout),
        tampered,
        built.handler,
        tmp_path / "tampered-layout",
        repository=repository,
    )
    assert image.digest != built.digest
    push(image.push_command)
    forged = Built(built.workspace, "", built.handler, image.pinned, built.installer)
    host, target = node(tmp_path, short_dir)
    before = snapshot(host)
    result = run_installer(runner, forged, "tampered-installer", host, target)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "firmware: " in result.stderr
    assert "has sha256" in result.stderr
    assert snapshot(host) == before


def rewrap(layout: Path, target: Path, wrap: Any) -> Path:
    """A copy of `layout` whose node-installer entry is `wrap(manifest bytes, digest)`'s blob."""
    shutil.copytree(layout, target)
    index = json.loads((target / "index.json").read_text())
    entry = index["manifests"][0]
    data, media_type = wrap(blob(target, entry["digest"]), entry)
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    (target / "blobs/sha256" / digest.removeprefix("sha256:")).write_bytes(data)
    entry.update(mediaType=media_type, digest=digest, size=len(data))
    (target / "index.json").write_text(json.dumps(index))
    return target


def test_an_image_index_in_the_layout_gives_the_same_image_and_docker_manifests_are_refused(
    release: Path, base_layout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`skopeo copy --all` writes an index: its linux/amd64 manifest is the image taken."""

    def index(manifest: bytes, entry: dict[str, Any]) -> tuple[bytes, str]:
        other = {**entry, "platform": {"architecture": "arm64", "os": "linux"}}
        document = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [other, entry]}
        return json.dumps(document).encode(), OCI_INDEX

    def docker(manifest: bytes, entry: dict[str, Any]) -> tuple[bytes, str]:
        document = {**json.loads(manifest), "mediaType": DOCKER_MANIFEST}
        return json.dumps(document).encode(), DOCKER_MANIFEST

    plain = run_build(release, tmp_path / "plain", base_layout, capsys)
    indexed = rewrap(base_layout, tmp_path / "indexed", index)
    assert run_build(release, tmp_path / "from-index", indexed, capsys).image == plain.image
    workspace = tmp_path / "docker"
    docker_base = rewrap(base_layout, tmp_path / "docker-base", docker)
    argv = ["runtime", "build", "--kata-release", str(release), "--platform", PLATFORM,
            "--output", str(workspace), "--max-vcpus", "1", "--image-repository", REPOSITORY,
            "--node-installer-layout", str(docker_base)]  # fmt: skip
    assert "is not an OCI image manifest" in refused(argv, capsys)
    assert not workspace.exists()
