"""The installer against a scratch host root: checks first, installs, patches, restarts once."""

from __future__ import annotations

import json
import shlex
import stat
import tomllib
from pathlib import Path

import pytest

from contrast.cli.main import main
from contrast.nodeinstaller.errors import ArtefactError, RestartError
from contrast.nodeinstaller.install import InstallRequest, install_runtime
from contrast.nodeinstaller.restart import run_command
from contrast.nodeinstaller.standins import write_standins
from contrast.nodeinstaller.targetconfig import TargetConfig, load_target_config
from contrast.platforms import by_name
from tests.nodeinstaller.conftest import BuiltRuntime, RecordingRunner, build_runtime, snapshot
from tests.nodeinstaller.test_containerdconfig import V2_USER_CONFIG, containerd_dump

NOW = 1_750_000_000.0


def request(host: Path, runtime: BuiltRuntime, **changes: object) -> InstallRequest:
    fields: dict[str, object] = {
        "host_root": host,
        "platform": runtime.platform,
        "target": TargetConfig(),
        "artefacts_dir": runtime.artefacts,
    }
    fields.update(changes)
    return InstallRequest(**fields)  # type: ignore[arg-type]


def marker_command(marker: Path) -> tuple[str, ...]:
    """A restart command that appends the unit's name to `marker`: one line per restart."""
    return ("sh", "-c", f'echo "$0" >> {shlex.quote(str(marker))}', "{unit}")


def test_install_writes_files_config_and_restarts_once(
    host_root: Path, runtime: BuiltRuntime, tmp_path: Path
) -> None:
    config = host_root / "etc/containerd/config.toml"
    config.write_text(V2_USER_CONFIG)
    config.chmod(0o600)
    marker = tmp_path / "restarts"
    report = install_runtime(
        request(host_root, runtime, restart_command=marker_command(marker)),
        description=runtime.description,
        runner=run_command,
        now=lambda: NOW,
    )
    install_dir = host_root / "opt/edgeless" / runtime.name
    for artefact in runtime.description.artefacts:
        installed = install_dir / artefact.relative_path
        assert installed.read_bytes() == (runtime.artefacts / artefact.relative_path).read_bytes()
        assert stat.S_IMODE(installed.stat().st_mode) == (0o755 if artefact.executable else 0o644)
    kata = tomllib.loads((install_dir / "etc/configuration-qemu-snp.toml").read_text())
    qemu = kata["hypervisor"]["qemu"]
    assert qemu["path"] == f"/opt/edgeless/{runtime.name}/bin/qemu-system-x86_64"
    assert qemu["image"] == f"/opt/edgeless/{runtime.name}/share/kata-containers.img"
    assert qemu["firmware"] == f"/opt/edgeless/{runtime.name}/snp/share/OVMF.fd"
    assert qemu["kernel_params"] == "console=hvc0 systemd.verity=1"
    assert qemu["sev_snp_guest"] is True
    assert qemu["enable_debug"] is kata["runtime"]["enable_debug"] is False

    backup = host_root / f"etc/containerd/config.toml.{int(NOW)}.bak"
    assert backup.read_text() == V2_USER_CONFIG
    assert stat.S_IMODE(config.stat().st_mode) == stat.S_IMODE(backup.stat().st_mode) == 0o600
    runtimes = containerd_dump(config)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"
    ]
    ours = runtimes[runtime.name]
    assert (
        ours["runtime_path"] == f"/opt/edgeless/{runtime.name}/bin/containerd-shim-contrast-cc-v2"
    )
    assert (
        ours["options"]["ConfigPath"]
        == f"/opt/edgeless/{runtime.name}/etc/configuration-qemu-snp.toml"
    )
    assert marker.read_text() == "containerd.service\n"
    assert report.restarted
    assert report.restarted_unit == "containerd.service"
    assert report.config_changed
    assert len(report.written) == len(runtime.description.artefacts) + 1
    assert not (install_dir / ".restart-pending").exists()
    assert [p.name for p in (host_root / "opt/edgeless").iterdir()] == [runtime.name]


def test_a_second_run_changes_nothing_and_does_not_restart(
    host_root: Path, runtime: BuiltRuntime
) -> None:
    (host_root / "etc/containerd/config.toml").write_text(V2_USER_CONFIG)
    first = RecordingRunner()
    install_runtime(request(host_root, runtime), description=runtime.description, runner=first)
    assert len(first.calls) == 1
    assert first.calls[0][-4:] == ["RestartUnit", "ss", "containerd.service", "replace"]
    before = snapshot(host_root)
    second = RecordingRunner()
    report = install_runtime(
        request(host_root, runtime), description=runtime.description, runner=second
    )
    assert second.calls == []
    assert snapshot(host_root) == before
    assert report.written == ()
    assert not report.config_changed
    assert not report.restarted


@pytest.mark.parametrize("damage", ["flip", "truncate", "remove", "extend"])
def test_a_corrupted_artefact_is_refused_and_the_host_is_unchanged(
    host_root: Path, runtime: BuiltRuntime, damage: str
) -> None:
    (host_root / "etc/containerd/config.toml").write_text(V2_USER_CONFIG)
    rootfs = runtime.artefacts / "share/kata-containers.img"
    data = bytearray(rootfs.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 1
        rootfs.write_bytes(data)
    elif damage == "truncate":
        rootfs.write_bytes(data[:-1])
    elif damage == "extend":
        rootfs.write_bytes(data + b"\0")
    else:
        rootfs.unlink()
    before = snapshot(host_root)
    runner = RecordingRunner()
    with pytest.raises(ArtefactError, match=r"rootfs: .*kata-containers\.img") as caught:
        install_runtime(request(host_root, runtime), description=runtime.description, runner=runner)
    assert snapshot(host_root) == before
    assert runner.calls == []
    assert "nothing was installed" in caught.value.explain()


def test_a_corrupted_artefact_is_refused_on_a_host_with_an_older_install(
    host_root: Path, runtime: BuiltRuntime, tmp_path: Path
) -> None:
    install_runtime(
        request(host_root, runtime), description=runtime.description, runner=RecordingRunner()
    )
    newer = build_runtime(runtime.platform, tmp_path / "newer", salt="new kernel")
    (newer.artefacts / "share/kata-kernel").write_bytes(b"evil kernel")
    before = snapshot(host_root)
    with pytest.raises(ArtefactError, match=r"kernel: .* has 11 bytes"):
        install_runtime(
            request(host_root, newer), description=newer.description, runner=RecordingRunner()
        )
    assert snapshot(host_root) == before


def test_a_new_runtime_version_installs_beside_the_old_one(
    host_root: Path, runtime: BuiltRuntime, tmp_path: Path
) -> None:
    (host_root / "etc/containerd/config.toml").write_text(V2_USER_CONFIG)
    install_runtime(
        request(host_root, runtime), description=runtime.description, runner=RecordingRunner()
    )
    newer = build_runtime(runtime.platform, tmp_path / "newer", salt="new kernel")
    runner = RecordingRunner()
    install_runtime(request(host_root, newer), description=newer.description, runner=runner)
    assert len(runner.calls) == 1
    config = host_root / "etc/containerd/config.toml"
    runtimes = tomllib.loads(config.read_text())["plugins"]["io.containerd.grpc.v1.cri"][
        "containerd"
    ]["runtimes"]
    assert {runtime.name, newer.name} <= set(runtimes)
    assert sorted(p.name for p in (host_root / "opt/edgeless").iterdir()) == sorted(
        [runtime.name, newer.name]
    )


def test_restart_pending_survives_a_failed_restart(host_root: Path, runtime: BuiltRuntime) -> None:
    failing = RecordingRunner(failing_units=frozenset({"containerd.service"}))
    with pytest.raises(RestartError, match=r"containerd\.service: Unit not found"):
        install_runtime(
            request(host_root, runtime), description=runtime.description, runner=failing
        )
    # The config is written, so the next run has nothing to change but must still restart.
    runner = RecordingRunner()
    report = install_runtime(
        request(host_root, runtime), description=runtime.description, runner=runner
    )
    assert not report.config_changed
    assert report.restarted
    assert len(runner.calls) == 1
    again = RecordingRunner()
    install_runtime(request(host_root, runtime), description=runtime.description, runner=again)
    assert again.calls == []


def test_units_are_tried_in_order(host_root: Path, runtime: BuiltRuntime) -> None:
    target = TargetConfig.model_validate({"systemd-unit-name": "k3s.service, containerd.service"})
    runner = RecordingRunner(failing_units=frozenset({"k3s.service"}))
    report = install_runtime(
        request(host_root, runtime, target=target), description=runtime.description, runner=runner
    )
    assert [call[-2] for call in runner.calls] == ["k3s.service", "containerd.service"]
    assert report.restarted_unit == "containerd.service"


def test_no_restart_and_empty_unit_list_leave_containerd_alone(
    host_root: Path, runtime: BuiltRuntime
) -> None:
    runner = RecordingRunner()
    report = install_runtime(
        request(host_root, runtime, restart=False), description=runtime.description, runner=runner
    )
    assert runner.calls == []
    assert report.config_changed
    assert "restart disabled" in (report.no_restart_reason or "")
    target = TargetConfig.model_validate({"systemd-unit-name": ""})
    report = install_runtime(
        request(host_root, runtime, target=target), description=runtime.description, runner=runner
    )
    assert runner.calls == []
    assert "systemd-unit-name is empty" in (report.no_restart_reason or "")


def test_target_config_paths_are_followed(host_root: Path, runtime: BuiltRuntime) -> None:
    target = TargetConfig.model_validate(
        {
            "containerd-config-path": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
            "kata-config-path": "etc/kata-containers/contrast.toml",
        }
    )
    install_runtime(
        request(host_root, runtime, target=target),
        description=runtime.description,
        runner=RecordingRunner(),
    )
    config = host_root / "var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    parsed = tomllib.loads(config.read_text())
    options = parsed["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"][
        runtime.name
    ]["options"]
    assert options == {"ConfigPath": "/etc/kata-containers/contrast.toml"}
    assert (host_root / "etc/kata-containers/contrast.toml").read_text().startswith("# Kata")
    assert not (host_root / "etc/containerd/config.toml").exists()


def test_cli_installs_the_shipped_runtime(
    host_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    platform = by_name("metal-qemu-tdx-gpu")
    artefacts = tmp_path / "standins"
    write_standins(platform, artefacts)
    (host_root / "etc/containerd/config.toml").write_text(V2_USER_CONFIG)
    marker = tmp_path / "restarts"
    arguments = [
        "node-installer", "--host-root", str(host_root), "--platform", "Metal-QEMU-TDX-GPU",
        "--artefacts", str(artefacts),
        "--restart-command", shlex.join(marker_command(marker)),
    ]  # fmt: skip
    assert main(arguments) == 0
    out, err = capsys.readouterr()
    assert f"runtime {platform.runtime_class_name}" in out
    assert "stand-in" in err
    assert marker.read_text() == "containerd.service\n"
    runtimes = containerd_dump(host_root / "etc/containerd/config.toml")["plugins"][
        "io.containerd.grpc.v1.cri"
    ]["containerd"]["runtimes"]
    assert runtimes[platform.runtime_class_name]["pod_annotations"] == [
        "io.katacontainers.*",
        "cdi.k8s.io/*",
    ]
    assert main(arguments) == 0
    assert "containerd not restarted: containerd's config was already up to date" in (
        capsys.readouterr().out
    )
    assert marker.read_text() == "containerd.service\n"


def test_cli_reads_a_configmap_directory(
    host_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    platform = by_name("k3s-qemu-snp")
    artefacts = tmp_path / "standins"
    write_standins(platform, artefacts)
    mount = tmp_path / "target-config"
    data = tmp_path / "target-config/..2025_01_01"
    data.mkdir(parents=True)
    (data / "containerd-config-path").write_text("/etc/k3s/config.toml\n")
    (data / "artefacts-dir").write_text(str(artefacts))
    (mount / "..data").symlink_to(data.name)
    for key in ("containerd-config-path", "artefacts-dir"):
        (mount / key).symlink_to(f"..data/{key}")
    assert load_target_config(mount).containerd_config_path == "etc/k3s/config.toml"
    arguments = [
        "node-installer", "--host-root", str(host_root), "--platform", "k3s-qemu-snp",
        "--target-config", str(mount), "--no-restart",
    ]  # fmt: skip
    assert main(arguments) == 0
    assert "containerd not restarted: restart disabled" in capsys.readouterr().out
    assert platform.runtime_class_name in (host_root / "etc/k3s/config.toml").read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"containerd-config": "x"}, "containerd-config: Extra inputs are not permitted"),
        ({"containerd-config-path": "../../etc/passwd"}, "leaves the host root"),
        ({"containerd-config-path": 7}, "containerd-config-path: Input should be a valid string"),
        ([1, 2], "is not a JSON object"),
    ],
)
def test_bad_target_config_is_one_readable_line(
    host_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: object,
    message: str,
) -> None:
    target = tmp_path / "target.json"
    target.write_text(json.dumps(content))
    before = snapshot(host_root)
    arguments = [
        "node-installer", "--host-root", str(host_root), "--platform", "metal-qemu-snp",
        "--target-config", str(target),
    ]  # fmt: skip
    assert main(arguments) == 1
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1
    assert err.startswith(f"contrast: target config {target} ")
    assert snapshot(host_root) == before


def test_missing_target_config_and_artefacts_are_named(
    host_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["node-installer", "--host-root", str(host_root), "--platform", "metal-qemu-snp"]
    assert main([*base, "--target-config", str(tmp_path / "nope.json")]) == 1
    assert "nope.json does not exist" in capsys.readouterr().err
    assert main([*base, "--artefacts", str(tmp_path / "empty")]) == 1
    err = capsys.readouterr().err
    assert "containerd-shim: " in err
    assert "is missing" in err
