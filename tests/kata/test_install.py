"""The node installer puts a built runtime into a host root, and a real containerd runs with it.

containerd (Debian's) is started on the patched config with its root, state and sockets in a
scratch directory; `ctr` shows that its CRI plugin loaded, and the CRI's own status (verbose, as
`crictl info` asks for it) lists the runtime handler with our shim and Kata configuration.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from contrast.cli.main import main
from contrast.kata.build import BuiltRuntime
from contrast.kuberesource.releaseimages import tagged
from contrast.local.containers import Containerd, Registry
from contrast.runtimedescription.shipped import load_payload
from tests.imagebuild.builder import BuiltImages
from tests.images.conftest import stop
from tests.kata import synthetic
from tests.kata.conftest import build
from tests.nodeinstaller.conftest import snapshot

CRI_STATUS = "/runtime.v1.RuntimeService/Status"
VERBOSE_STATUS_REQUEST = b"\x08\x01"  # StatusRequest{verbose: true}


@pytest.fixture
def built(release: Path, tmp_path: Path) -> BuiltRuntime:
    return build(release, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=1)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ctd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def host_config(state: Path) -> str:
    """A node's containerd config whose every path is in the scratch directory."""
    return f"""\
version = 2
root = "{state}/root"
state = "{state}/state"

[grpc]
  address = "{state}/containerd.sock"

[ttrpc]
  address = "{state}/containerd-ttrpc.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "{state}/opt"
"""


def install(host: Path, payload: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["node-installer", "--host-root", str(host), "--payload", str(payload),
                 "--no-restart"]) == 0  # fmt: skip
    return capsys.readouterr().out


def _varint(data: bytes, index: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[index]
        index += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, index


def _fields(data: bytes) -> Iterator[tuple[int, bytes | int]]:
    """Protobuf fields of a message: (number, bytes for length-delimited, int for varints)."""
    index = 0
    while index < len(data):
        key, index = _varint(data, index)
        if key & 7 == 2:
            length, index = _varint(data, index)
            yield key >> 3, data[index : index + length]
            index += length
        elif key & 7 == 0:
            value, index = _varint(data, index)
            yield key >> 3, value
        else:
            raise AssertionError(f"unexpected wire type {key & 7}")


def cri_config(socket: Path) -> dict[str, Any]:
    """The CRI plugin's effective config from its verbose Status (StatusResponse.info["config"])."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        status = channel.unary_unary(
            CRI_STATUS, request_serializer=lambda x: x, response_deserializer=lambda x: x
        )
        response = status(VERBOSE_STATUS_REQUEST, timeout=30)
    info = {}
    for number, value in _fields(response):
        if number == 2 and isinstance(value, bytes):  # map<string, string> info
            entry = dict(_fields(value))
            key, text = entry.get(1, b""), entry.get(2, b"")
            assert isinstance(key, bytes)
            assert isinstance(text, bytes)
            info[key.decode()] = text.decode()
    document: dict[str, Any] = json.loads(info["config"])
    return document


def running_containerd(config: Path, socket: Path, log: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("containerd")
    assert binary, "containerd is not installed (scripts/system-deps.sh installs it)"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [binary, "--config", str(config)], stdout=output, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 60
    while not socket.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"containerd did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return process


def test_a_built_runtime_installs_and_containerd_lists_it(
    built: BuiltRuntime, tmp_path: Path, short_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = tmp_path / "host"
    config = host / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(host_config(short_dir))
    out = install(host, built.payload, capsys)
    assert f"runtime {built.handler} in /opt/edgeless/{built.handler}" in out
    assert "stand-in" not in out
    installed = host / "opt/edgeless" / built.handler

    # Exactly the payload's files, and the Kata config rendered for this handler.
    description = load_payload(built.payload)
    for artefact in description.artefacts:
        relative = str(artefact.relative_path)
        assert (installed / relative).read_bytes() == (built.payload / relative).read_bytes()
    shim = installed / "bin/containerd-shim-contrast-cc-v2"
    assert shim.read_bytes() == synthetic.files()["bin/containerd-shim-kata-v2"]
    assert os.access(shim, os.X_OK)
    kata = tomllib.loads((installed / "etc/configuration-qemu-snp.toml").read_text())
    qemu = kata["hypervisor"]["qemu"]
    prefix = f"/opt/edgeless/{built.handler}"
    assert qemu["path"] == f"{prefix}/bin/qemu-system-x86_64-snp-experimental"
    assert qemu["valid_hypervisor_paths"] == [qemu["path"]]
    assert qemu["kernel"] == f"{prefix}/share/kata-containers/vmlinuz-confidential.container"
    assert qemu["image"] == f"{prefix}/share/kata-containers/kata-containers-confidential.img"
    assert qemu["firmware"] == f"{prefix}/share/ovmf/AMDSEV.fd"
    for key in ("path", "kernel", "image", "firmware"):
        assert (host / qemu[key].lstrip("/")).is_file()
    assert "cc_init_data" in qemu["enable_annotations"]
    assert qemu["kernel_verity_params"] == synthetic.VERITY
    assert qemu["default_memory"] == 512
    assert kata["runtime"]["experimental_force_guest_pull"] is True
    assert kata["runtime"]["emptydir_mode"] == "block-encrypted"
    assert kata["agent"]["kata"]["debug_console_enabled"] is False
    assert "@@runtimeName@@" not in (installed / "etc/configuration-qemu-snp.toml").read_text()

    # A second run changes nothing.
    before = snapshot(host)
    assert "files written: 0" in install(host, built.payload, capsys)
    assert snapshot(host) == before

    # containerd accepts the config: `config dump` and a running daemon.
    dump = subprocess.run(
        ["containerd", "--config", str(config), "config", "dump"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    runtimes = tomllib.loads(dump.stdout)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"
    ]
    assert runtimes[built.handler]["runtime_path"] == f"{prefix}/bin/containerd-shim-contrast-cc-v2"
    socket = short_dir / "containerd.sock"
    process = running_containerd(config, socket, tmp_path / "containerd.log")
    try:
        plugins = subprocess.run(
            ["ctr", "--address", str(socket), "plugins", "ls"],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        cri = [row.split() for row in plugins.stdout.splitlines() if " cri " in row]
        assert [(r[0], r[-1]) for r in cri] == [("io.containerd.grpc.v1", "ok")], plugins.stdout
        listed = cri_config(socket)["containerd"]["runtimes"]
    finally:
        stop(process)
    assert sorted(listed) == sorted(["runc", built.handler])
    ours = listed[built.handler]
    assert ours["runtimeType"] == "io.containerd.contrast-cc.v2"
    assert ours["runtimePath"] == f"{prefix}/bin/containerd-shim-contrast-cc-v2"
    assert ours["options"] == {"ConfigPath": f"{prefix}/etc/configuration-qemu-snp.toml"}
    assert ours["PodAnnotations"] == ["io.katacontainers.*"]
    assert ours["privileged_without_host_devices"] is True


def test_a_payload_with_a_changed_file_installs_nothing(
    built: BuiltRuntime, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = tmp_path / "host"
    (host / "etc/containerd").mkdir(parents=True)
    before = snapshot(host)
    firmware = built.payload / "share/ovmf/AMDSEV.fd"
    firmware.write_bytes(firmware.read_bytes()[:-1] + b"\x00")
    argv = ["node-installer", "--host-root", str(host), "--payload", str(built.payload)]
    assert main([*argv, "--no-restart"]) == 1
    err = capsys.readouterr().err
    assert "firmware: " in err
    assert "has sha256" in err
    assert snapshot(host) == before
    # An extra file in the payload is not installed either: only what runtime.json pins is.
    firmware.unlink()
    assert main([*argv, "--no-restart"]) == 1
    assert "firmware: " in capsys.readouterr().err
    (built.payload / "runtime.json").unlink()
    assert main([*argv, "--no-restart"]) == 1
    assert "has no readable runtime.json" in capsys.readouterr().err
    assert snapshot(host) == before


def test_the_node_installer_image_installs_a_built_runtime_that_containerd_lists(
    built: BuiltRuntime, built_images: BuiltImages, tmp_path: Path, short_dir: Path
) -> None:
    """The node-installer image, run by containerd with runc, installs into a bind-mounted root."""
    host = tmp_path / "host"
    config = host / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(host_config(short_dir))
    registry = Registry(tmp_path / "registry")
    runner = Containerd(tmp_path / "containerd")
    registry.start()
    runner.start()
    try:
        pushed = registry.push(built_images.layout, tagged("node-installer"), "node-installer")
        image = f"{pushed.rpartition(':')[0]}@{built_images.digest('node-installer')}"
        runner.pull(image)
        result = runner.run_to_completion(
            "node-installer",
            image,
            ["contrast", "node-installer", "--host-root", str(host), "--payload",
             str(built.payload), "--no-restart"],
            mounts=[host, built.payload],
            timeout=120,
        )  # fmt: skip
    finally:
        runner.stop()
        registry.stop()
    assert result.returncode == 0, result.stderr
    assert f"runtime {built.handler} in /opt/edgeless/{built.handler}" in result.stdout
    prefix = f"/opt/edgeless/{built.handler}"
    shim = host / prefix.lstrip("/") / "bin/containerd-shim-contrast-cc-v2"
    assert shim.read_bytes() == synthetic.files()["bin/containerd-shim-kata-v2"]
    socket = short_dir / "containerd.sock"
    process = running_containerd(config, socket, tmp_path / "containerd.log")
    try:
        listed = cri_config(socket)["containerd"]["runtimes"]
    finally:
        stop(process)
    assert listed[built.handler]["runtimePath"] == f"{prefix}/bin/containerd-shim-contrast-cc-v2"
