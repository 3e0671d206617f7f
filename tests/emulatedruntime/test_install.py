"""The node installer for the emulated platforms: launcher, containerd runtime table, roots."""

from __future__ import annotations

import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from contrast.emulatedruntime.launcher import LAUNCHER_NAME
from contrast.nodeinstaller.install import InstallRequest, install_runtime
from contrast.nodeinstaller.targetconfig import TargetConfig
from contrast.platforms import by_name
from contrast.runtimedescription.digest import handler_of
from contrast.runtimedescription.shipped import load_runtime
from tests.nodeinstaller.conftest import RecordingRunner

NODE_CONFIG = """\
# the node's own config
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"""


@pytest.mark.parametrize("name", ["emulated-snp", "emulated-tdx"])
def test_the_emulated_runtime_installs_its_launcher_and_runtime_table(
    tmp_path: Path, name: str
) -> None:
    platform = by_name(name)
    host = tmp_path / "host"
    (host / "etc/containerd").mkdir(parents=True)
    (host / "etc/containerd/config.toml").write_text(NODE_CONFIG)
    target = TargetConfig.model_validate({"emulated-python": sys.executable})
    request = InstallRequest(host, platform, target, tmp_path / "no-artefacts")
    runner = RecordingRunner()
    report = install_runtime(request, runner=runner)

    handler = handler_of(load_runtime(name))
    # The handler is the one the RuntimeClass of `contrast runtime --platform <name>` names.
    assert handler == platform.runtime_class_name
    launcher = f"/opt/edgeless/{handler}/bin/{LAUNCHER_NAME}"
    assert report.written == (launcher,)
    assert report.restarted
    text = (host / launcher.lstrip("/")).read_text()
    assert f"CONTRAST_EMULATED_PLATFORM={name}" in text
    assert f"exec {sys.executable} -m contrast.emulatedruntime runc" in text
    assert stat.S_IMODE((host / launcher.lstrip("/")).stat().st_mode) == 0o755

    config = tomllib.loads((host / "etc/containerd/config.toml").read_text())
    runtimes = config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes[handler] == {
        "runtime_type": "io.containerd.runc.v2",
        "pod_annotations": ["io.katacontainers.*"],
        "privileged_without_host_devices": True,
        "options": {"BinaryName": launcher},
    }
    assert runtimes["runc"] == {"runtime_type": "io.containerd.runc.v2"}  # the node's, kept

    # The roots: made once, private keys root-only, on the node only.
    roots = host / "var/lib/contrast-emulated-runtime/roots"
    assert stat.S_IMODE(roots.stat().st_mode) == 0o700
    assert (roots / "snp/milan/vcek.key").is_file()
    assert (roots / "tdx/chain.pem").is_file()
    keys = {p: p.read_bytes() for p in roots.rglob("*.key")}

    again = install_runtime(request, runner=runner)
    assert (again.written, again.config_changed, again.restarted) == ((), False, False)
    assert {p: p.read_bytes() for p in roots.rglob("*.key")} == keys


def test_the_installed_launcher_passes_other_calls_to_runc(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    target = TargetConfig.model_validate(
        {"emulated-runc": "runc", "emulated-python": "/usr/bin/python3"}
    )
    report = install_runtime(
        InstallRequest(host, by_name("emulated-snp"), target, tmp_path, restart=False),
        runner=RecordingRunner(),
    )
    launcher = host / report.written[0].lstrip("/")
    result = subprocess.run([launcher, "--version"], capture_output=True, text=True, check=True)
    assert result.stdout.startswith("runc version")


def test_containerd_reads_the_runtime_table_as_written(tmp_path: Path) -> None:
    """containerd 1.6's own `config dump`: the handler's runc options and pod annotations."""
    host = tmp_path / "host"
    (host / "etc/containerd").mkdir(parents=True)
    (host / "etc/containerd/config.toml").write_text(NODE_CONFIG)
    platform = by_name("emulated-snp")
    report = install_runtime(
        InstallRequest(
            host,
            platform,
            # Without it, the installer would copy its own Python (this venv's) to the host root.
            TargetConfig.model_validate({"emulated-python": "/usr/bin/python3"}),
            tmp_path,
            restart=False,
        ),
        runner=RecordingRunner(),
    )
    config = host / "etc/containerd/config.toml"
    dump = subprocess.run(
        ["containerd", "--config", str(config), "config", "dump"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    runtimes = tomllib.loads(dump.stdout)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"
    ]
    table = runtimes[report.runtime_name]
    assert table["runtime_type"] == "io.containerd.runc.v2"
    assert table["pod_annotations"] == ["io.katacontainers.*"]
    assert table["options"]["BinaryName"] == report.written[0]
    assert runtimes["runc"]["runtime_type"] == "io.containerd.runc.v2"
