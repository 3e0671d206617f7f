"""A host root whose paths are symlinks: the installer stays inside it and edits configs in place.

The host's links mean what they mean on the node: an absolute target starts at the host root,
not at the installer's own `/`, and `..` stops at the host root (issue 24, item 4). Each test
is an attack or an unlucky layout that the installer once turned into harm: a symlinked
containerd config replaced by a minimal one (its `SystemdCgroup`, CNI `bin_dir` and
`sandbox_image` lost, no backup), artefacts and the Kata config written outside the host root.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from contrast.cli.main import main
from contrast.nodeinstaller.errors import NodeInstallerError
from contrast.nodeinstaller.install import install_runtime
from contrast.nodeinstaller.standins import write_standins
from contrast.nodeinstaller.targetconfig import TargetConfig
from contrast.platforms import by_name
from tests.nodeinstaller.conftest import BuiltRuntime, RecordingRunner, build_runtime, snapshot
from tests.nodeinstaller.test_containerdconfig import V2_USER_CONFIG, containerd_dump
from tests.nodeinstaller.test_install import NOW, request

CNI = '    [plugins."io.containerd.grpc.v1.cri".cni]\n      bin_dir = "/opt/cni/bin-custom"\n'
USER_CONFIG = V2_USER_CONFIG + CNI
CRI = "io.containerd.grpc.v1.cri"


def deep_path(outside: Path) -> str:
    """`outside` as a relative link target that climbs far above any host root first."""
    return "../" * 40 + str(outside).lstrip("/")


def assert_users_settings_kept(config: Path, handler: str) -> None:
    """containerd reads the user's settings and our runtime from `config`."""
    cri = containerd_dump(config)["plugins"][CRI]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.9"
    assert cri["cni"]["bin_dir"] == "/opt/cni/bin-custom"
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["runc"]["options"]["SystemdCgroup"] is True
    assert runtimes[handler]["runtime_type"] == "io.containerd.contrast-cc.v2"


def test_an_absolutely_symlinked_config_is_edited_at_its_target_in_the_host_root(
    host_root: Path, runtime: BuiltRuntime
) -> None:
    real = host_root / "etc/containerd/real.toml"
    real.write_text(USER_CONFIG)
    real.chmod(0o600)
    config = host_root / "etc/containerd/config.toml"
    config.symlink_to("/etc/containerd/real.toml")
    report = install_runtime(
        request(host_root, runtime),
        description=runtime.description,
        runner=RecordingRunner(),
        now=lambda: NOW,
    )
    assert config.is_symlink()
    assert os.readlink(config) == "/etc/containerd/real.toml"
    assert real.read_text().startswith(USER_CONFIG)
    assert_users_settings_kept(real, runtime.name)
    backup = host_root / f"etc/containerd/real.toml.{int(NOW)}.bak"
    assert backup.read_text() == USER_CONFIG
    assert stat.S_IMODE(real.stat().st_mode) == stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert report.backup == f"/etc/containerd/real.toml.{int(NOW)}.bak"
    assert report.containerd_config == "/etc/containerd/config.toml"
    assert report.containerd_config_target == "/etc/containerd/real.toml"
    again = install_runtime(
        request(host_root, runtime), description=runtime.description, runner=RecordingRunner()
    )
    assert not again.config_changed


def test_dot_dot_in_a_config_link_stops_at_the_host_root(
    host_root: Path, runtime: BuiltRuntime, tmp_path: Path
) -> None:
    # On the installer's own root this names a file outside the host root: it must not be read.
    decoy = tmp_path / "installer-side" / "config.toml"
    decoy.parent.mkdir()
    decoy.write_text("version = 2\n# the installer's own file, not the node's\n")
    inside = host_root / str(decoy).lstrip("/")
    inside.parent.mkdir(parents=True)
    inside.write_text(USER_CONFIG)
    (host_root / "etc/containerd/config.toml").symlink_to(deep_path(decoy))
    install_runtime(
        request(host_root, runtime), description=runtime.description, runner=RecordingRunner()
    )
    assert decoy.read_text() == "version = 2\n# the installer's own file, not the node's\n"
    assert inside.read_text().startswith(USER_CONFIG)
    assert_users_settings_kept(inside, runtime.name)
    assert (host_root / "etc/containerd/config.toml").is_symlink()


def test_an_absolute_opt_link_keeps_the_artefacts_in_the_host_root(
    host_root: Path, runtime: BuiltRuntime, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (host_root / "opt").symlink_to(str(outside))  # the host's /opt is elsewhere on the host
    inside = host_root / str(outside).lstrip("/")
    inside.mkdir(parents=True)
    install_runtime(
        request(host_root, runtime), description=runtime.description, runner=RecordingRunner()
    )
    assert list(outside.iterdir()) == []
    install_dir = inside / "edgeless" / runtime.name
    for artefact in runtime.description.artefacts:
        installed = install_dir / artefact.relative_path
        assert installed.read_bytes() == (runtime.artefacts / artefact.relative_path).read_bytes()
        assert stat.S_IMODE(installed.lstat().st_mode) == artefact.mode
    assert (install_dir / "etc/configuration-qemu-snp.toml").read_text().startswith("# Kata")
    assert [p.name for p in (inside / "edgeless").iterdir()] == [runtime.name]
    before = snapshot(host_root)
    again = install_runtime(
        request(host_root, runtime), description=runtime.description, runner=RecordingRunner()
    )
    assert again.written == ()
    assert snapshot(host_root) == before


def test_a_kata_config_dir_linked_out_with_dot_dot_stays_in_the_host_root(
    host_root: Path, runtime: BuiltRuntime, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (host_root / "etc/kata-containers").symlink_to(deep_path(outside))
    target = TargetConfig.model_validate({"kata-config-path": "etc/kata-containers/contrast.toml"})
    report = install_runtime(
        request(host_root, runtime, target=target),
        description=runtime.description,
        runner=RecordingRunner(),
    )
    assert list(outside.iterdir()) == []
    written = host_root / str(outside).lstrip("/") / "contrast.toml"
    assert written.read_text().startswith("# Kata")
    assert "/etc/kata-containers/contrast.toml" in report.written


def test_a_symlinked_artefact_in_the_install_dir_is_replaced_not_followed(
    host_root: Path, runtime: BuiltRuntime, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"not yours\n")
    install_dir = host_root / "opt/edgeless" / runtime.name
    (install_dir / "bin").mkdir(parents=True)
    (install_dir / "bin/kata-runtime").symlink_to(victim)
    (install_dir / "share").symlink_to("/" + "../" * 8 + str(victim.parent).lstrip("/"))
    install_runtime(
        request(host_root, runtime), description=runtime.description, runner=RecordingRunner()
    )
    assert victim.read_bytes() == b"not yours\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artefacts", "host", "victim"]
    kata_runtime = install_dir / "bin/kata-runtime"
    assert not kata_runtime.is_symlink()
    assert kata_runtime.read_bytes() == (runtime.artefacts / "bin/kata-runtime").read_bytes()
    # `share` names a directory inside the host root, which receives the shared files.
    shared = host_root / str(victim.parent).lstrip("/")
    assert (shared / "kata-containers.img").read_bytes() == (
        runtime.artefacts / "share/kata-containers.img"
    ).read_bytes()


@pytest.mark.parametrize("links", ["self", "pair", "chain of 41"])
def test_a_link_loop_is_one_clear_error_and_the_host_is_unchanged(
    host_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], links: str
) -> None:
    directory = host_root / "etc/containerd"
    if links == "self":
        (directory / "config.toml").symlink_to("config.toml")
    elif links == "pair":
        (directory / "config.toml").symlink_to("/etc/containerd/other.toml")
        (directory / "other.toml").symlink_to("config.toml")
    else:
        (directory / "config.toml").symlink_to("link-0")
        for index in range(40):
            (directory / f"link-{index}").symlink_to(f"/etc/containerd/link-{index + 1}")
        (directory / "link-40").write_text(V2_USER_CONFIG)
    artefacts = tmp_path / "standins"
    write_standins(by_name("metal-qemu-snp"), artefacts)
    before = snapshot(host_root)
    arguments = [
        "node-installer", "--host-root", str(host_root), "--platform", "metal-qemu-snp",
        "--artefacts", str(artefacts), "--no-restart",
    ]  # fmt: skip
    assert main(arguments) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "/etc/containerd/config.toml" in err
    assert "too many symbolic links (more than 40)" in err
    assert "internal error" not in err
    assert snapshot(host_root) == before


def test_a_chain_of_40_links_is_followed(host_root: Path, runtime: BuiltRuntime) -> None:
    directory = host_root / "etc/containerd"
    (directory / "config.toml").symlink_to("link-1")
    for index in range(1, 40):
        (directory / f"link-{index}").symlink_to(f"/etc/containerd/link-{index + 1}")
    (directory / "link-40").write_text(V2_USER_CONFIG)
    report = install_runtime(
        request(host_root, runtime), description=runtime.description, runner=RecordingRunner()
    )
    assert report.containerd_config_target == "/etc/containerd/link-40"
    assert (directory / "link-40").read_text().startswith(V2_USER_CONFIG)


def test_a_config_that_is_not_a_regular_file_is_refused(
    host_root: Path, runtime: BuiltRuntime
) -> None:
    (host_root / "dev").mkdir()
    os.mkfifo(host_root / "dev/fifo")
    (host_root / "etc/containerd/config.toml").symlink_to("/dev/fifo")
    before = snapshot(host_root)
    with pytest.raises(NodeInstallerError, match=r"/dev/fifo is not a regular file"):
        install_runtime(
            request(host_root, runtime), description=runtime.description, runner=RecordingRunner()
        )
    assert snapshot(host_root) == before


def test_a_nodes_own_kata_config_is_backed_up_and_written_through_its_link(
    host_root: Path, runtime: BuiltRuntime, tmp_path: Path
) -> None:
    defaults = host_root / "usr/share/defaults/kata-containers"
    defaults.mkdir(parents=True)
    own = defaults / "configuration-qemu.toml"
    own.write_text("# the node's own Kata configuration\n")
    own.chmod(0o640)
    link = host_root / "etc/kata-containers/configuration.toml"
    link.parent.mkdir(parents=True)
    link.symlink_to("/usr/share/defaults/kata-containers/configuration-qemu.toml")
    target = TargetConfig.model_validate(
        {"kata-config-path": "/etc/kata-containers/configuration.toml"}
    )
    report = install_runtime(
        request(host_root, runtime, target=target),
        description=runtime.description,
        runner=RecordingRunner(),
        now=lambda: NOW,
    )
    assert link.is_symlink()
    assert own.read_text().startswith(f"# Kata Containers configuration of runtime {runtime.name}")
    backup = defaults / f"configuration-qemu.toml.{int(NOW)}.bak"
    assert backup.read_text() == "# the node's own Kata configuration\n"
    assert stat.S_IMODE(backup.stat().st_mode) == 0o640
    assert report.kata_config_backup == (
        f"/usr/share/defaults/kata-containers/configuration-qemu.toml.{int(NOW)}.bak"
    )
    # A newer runtime rewrites the installer's own file without another backup.
    newer = build_runtime(runtime.platform, tmp_path / "newer", salt="new kernel")
    again = install_runtime(
        request(host_root, newer, target=target),
        description=newer.description,
        runner=RecordingRunner(),
        now=lambda: NOW + 60,
    )
    assert again.kata_config_backup is None
    assert own.read_text().startswith(f"# Kata Containers configuration of runtime {newer.name}")
    assert sorted(p.name for p in defaults.iterdir()) == sorted([backup.name, own.name])


def test_a_kata_config_path_that_is_no_file_is_refused_before_any_change(
    host_root: Path, runtime: BuiltRuntime
) -> None:
    (host_root / "etc/kata-containers/contrast.toml").mkdir(parents=True)
    target = TargetConfig.model_validate({"kata-config-path": "etc/kata-containers/contrast.toml"})
    before = snapshot(host_root)
    with pytest.raises(NodeInstallerError, match=r"contrast\.toml is not a regular file"):
        install_runtime(
            request(host_root, runtime, target=target),
            description=runtime.description,
            runner=RecordingRunner(),
        )
    assert snapshot(host_root) == before
