"""containerd's config: the runtime is added, everything else kept, and containerd accepts it.

The containerd checks run Debian's real `containerd config dump`, which loads the file the way the
daemon does and prints the effective config.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from contrast.nodeinstaller.containerdconfig import (
    ContainerdRuntime,
    patch_containerd_config,
    render_runtime_block,
    runtime_table_path,
)
from contrast.nodeinstaller.errors import ContainerdConfigError

HANDLER = "contrast-cc-metal-qemu-snp-0123abcd"
RUNTIME = ContainerdRuntime(
    handler=HANDLER,
    shim_path=f"/opt/edgeless/{HANDLER}/bin/containerd-shim-contrast-cc-v2",
    kata_config_path=f"/opt/edgeless/{HANDLER}/etc/configuration-qemu-snp.toml",
)

V2_USER_CONFIG = """\
# Node config, managed by the platform team. Keep the mirror!
version = 2
root = "/var/lib/containerd-big"  # the larger disk
oom_score = -999

[grpc]
  address = "/run/containerd/containerd.sock"
  max_recv_message_size = 16777216

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"  # custom snapshotter
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gvisor]
          runtime_type = "io.containerd.runsc.v1"
    [plugins."io.containerd.grpc.v1.cri".registry]
      [plugins."io.containerd.grpc.v1.cri".registry.mirrors]
        [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
          endpoint = ["https://mirror.example.com", "https://registry-1.docker.io"]
"""

V3_USER_CONFIG = """\
# containerd 2.x node config
version = 3
root = "/var/lib/containerd-big"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "native"  # custom snapshotter
    [plugins."io.containerd.cri.v1.images".registry]
      config_path = "/etc/containerd/certs.d"  # mirrors live in hosts.toml files
  [plugins."io.containerd.cri.v1.runtime"]
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = true
"""


def lookup(document: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


def containerd_dump(config: Path) -> dict[str, Any]:
    """The effective config containerd reads from `config`, as parsed TOML."""
    binary = shutil.which("containerd")
    assert binary, "containerd is not installed (scripts/system-deps.sh installs it)"
    completed = subprocess.run(
        [binary, "--config", str(config), "config", "dump"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    dump = tomllib.loads(completed.stdout)
    dump.pop("imports", None)  # names the file, which differs between the dumps compared
    return dump


def containerd_version() -> str:
    completed = subprocess.run(
        ["containerd", "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    return completed.stdout.strip()


def assert_structurally_patched(original: str, patched: str, version: int) -> None:
    """Prior bytes untouched, exactly one new block after them holding the runtime's table."""
    assert patched.startswith(original)
    block = patched[len(original) :]
    assert block == "\n" + render_runtime_block(version, RUNTIME)
    assert tomllib.loads(block) == _nested(runtime_table_path(version, HANDLER), RUNTIME.table())
    after = tomllib.loads(patched)
    assert lookup(after, runtime_table_path(version, HANDLER)) == RUNTIME.table()


def _nested(path: tuple[str, ...], leaf: dict[str, Any]) -> dict[str, Any]:
    node = leaf
    for key in reversed(path):
        node = {key: node}
    return node


def test_v2_config_with_user_content_is_accepted_by_containerd(tmp_path: Path) -> None:
    patched = patch_containerd_config(V2_USER_CONFIG, RUNTIME)
    assert patched.changed
    assert patched.version == 2
    assert_structurally_patched(V2_USER_CONFIG, patched.text, 2)
    config = tmp_path / "config.toml"
    config.write_text(V2_USER_CONFIG)
    before = containerd_dump(config)
    config.write_text(patched.text)
    after = containerd_dump(config)

    runtimes = after["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    ours = runtimes.pop(HANDLER)
    assert ours["runtime_type"] == "io.containerd.contrast-cc.v2"
    assert ours["runtime_path"] == RUNTIME.shim_path
    assert ours["pod_annotations"] == ["io.katacontainers.*"]
    assert ours["privileged_without_host_devices"] is True
    assert ours["options"] == {"ConfigPath": RUNTIME.kata_config_path}
    # Everything else containerd sees is exactly what it saw before the patch.
    assert after == before
    cri = before["plugins"]["io.containerd.grpc.v1.cri"]
    assert before["root"] == "/var/lib/containerd-big"
    assert before["grpc"]["max_recv_message_size"] == 16777216
    assert cri["containerd"]["snapshotter"] == "native"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert cri["containerd"]["runtimes"]["gvisor"]["runtime_type"] == "io.containerd.runsc.v1"
    assert cri["registry"]["mirrors"]["docker.io"]["endpoint"][0] == "https://mirror.example.com"


def test_v3_config_with_user_content(tmp_path: Path) -> None:
    patched = patch_containerd_config(V3_USER_CONFIG, RUNTIME)
    assert patched.changed
    assert patched.version == 3
    assert_structurally_patched(V3_USER_CONFIG, patched.text, 3)
    assert "# mirrors live in hosts.toml files" in patched.text
    parsed = tomllib.loads(patched.text)
    assert parsed["plugins"]["io.containerd.cri.v1.images"]["snapshotter"] == "native"
    assert "io.containerd.grpc.v1.cri" not in parsed["plugins"]

    config = tmp_path / "config.toml"
    config.write_text(patched.text)
    after = containerd_dump(config)
    cri = after.get("plugins", {}).get("io.containerd.cri.v1.runtime")
    if after.get("version") == 2 and cri is None:
        reason = (
            f"{containerd_version()} cannot load `version = 3` configs: it reads the file"
            " without error but ignores its `io.containerd.cri.v1.runtime` and"
            " `io.containerd.cri.v1.images` sections (its dump says version 2 and holds neither),"
            " so containerd cannot show the v3 runtime; the structural checks above passed"
        )
        print(reason)
        pytest.skip(reason)
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes[HANDLER]["runtime_path"] == RUNTIME.shim_path
    assert runtimes["runc"]["options"]["SystemdCgroup"] is True
    assert after["plugins"]["io.containerd.cri.v1.images"]["snapshotter"] == "native"


def test_a_missing_config_becomes_a_minimal_v2_one_containerd_accepts(tmp_path: Path) -> None:
    patched = patch_containerd_config(None, RUNTIME)
    assert patched.text.startswith("version = 2\n")
    config = tmp_path / "config.toml"
    config.write_text(patched.text)
    runtimes = containerd_dump(config)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"
    ]
    assert runtimes[HANDLER]["options"]["ConfigPath"] == RUNTIME.kata_config_path
    assert runtimes["runc"]["runtime_type"] == "io.containerd.runc.v2"


def test_the_default_runtime_survives_when_the_config_named_no_runtime(tmp_path: Path) -> None:
    # containerd replaces its built-in runtime list with the config's as soon as the config names
    # one: without the restated `runc` entry, containerd would lose its default runtime.
    original = (
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]\n'
        'endpoint = ["https://mirror.example.com"]\n'
    )
    patched = patch_containerd_config(original, RUNTIME)
    assert patched.text.startswith(original)
    assert patched.text.count("runtimes.runc]") == 1
    config = tmp_path / "config.toml"
    config.write_text(original)
    before = containerd_dump(config)
    config.write_text(patched.text)
    after = containerd_dump(config)
    runtimes = after["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert set(runtimes) == {"runc", HANDLER}
    del runtimes[HANDLER]
    # The built-in entry lists runc's options with their zero values; the restated one leaves
    # them out, which the runc shim reads the same way. Everything else is identical.
    before_runc = before["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]
    assert not any(before_runc.pop("options").values())
    assert runtimes["runc"].pop("options") == {}
    assert after == before
    assert not patch_containerd_config(patched.text, RUNTIME).changed


def test_a_custom_default_runtime_is_left_to_the_user() -> None:
    original = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'default_runtime_name = "crun"\n'
    )
    assert "runtimes.runc]" not in patch_containerd_config(original, RUNTIME).text


def test_gpu_runtimes_pass_cdi_annotations(tmp_path: Path) -> None:
    gpu = ContainerdRuntime(
        handler=HANDLER, shim_path=RUNTIME.shim_path, kata_config_path="/k.toml", gpu=True
    )
    config = tmp_path / "config.toml"
    config.write_text(patch_containerd_config(V2_USER_CONFIG, gpu).text)
    dumped = containerd_dump(config)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert dumped["runtimes"][HANDLER]["pod_annotations"] == ["io.katacontainers.*", "cdi.k8s.io/*"]


@pytest.mark.parametrize("original", [V2_USER_CONFIG, V3_USER_CONFIG, None])
def test_patching_twice_changes_nothing(original: str | None) -> None:
    once = patch_containerd_config(original, RUNTIME)
    twice = patch_containerd_config(once.text, RUNTIME)
    assert not twice.changed
    assert twice.text == once.text


def test_a_changed_runtime_replaces_its_table_and_keeps_the_rest(tmp_path: Path) -> None:
    first = patch_containerd_config(V2_USER_CONFIG, RUNTIME).text
    moved = ContainerdRuntime(
        handler=HANDLER, shim_path=RUNTIME.shim_path, kata_config_path="/etc/kata/other.toml"
    )
    second = patch_containerd_config(first, moved)
    assert second.changed
    assert second.text.startswith(V2_USER_CONFIG)
    assert second.text.count(f"runtimes.{HANDLER}]") == 1
    assert "/etc/kata/other.toml" in second.text
    assert RUNTIME.kata_config_path not in second.text
    config = tmp_path / "config.toml"
    config.write_text(second.text)
    runtimes = containerd_dump(config)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"
    ]
    assert runtimes[HANDLER]["options"] == {"ConfigPath": "/etc/kata/other.toml"}
    assert set(runtimes) == {"runc", "gvisor", HANDLER}


def test_a_user_written_table_in_the_middle_is_replaced_in_place_of_nothing_else() -> None:
    stale = V2_USER_CONFIG.replace(
        '    [plugins."io.containerd.grpc.v1.cri".registry]\n',
        f'        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{HANDLER}]\n'
        '          runtime_type = "io.containerd.kata.v2"\n'
        '    [plugins."io.containerd.grpc.v1.cri".registry]\n',
    )
    patched = patch_containerd_config(stale, RUNTIME)
    assert 'runtime_type = "io.containerd.kata.v2"' not in patched.text
    assert patched.text.startswith(V2_USER_CONFIG[: V2_USER_CONFIG.index("    [plugins.")])
    assert "# Node config, managed by the platform team. Keep the mirror!" in patched.text
    assert "# custom snapshotter" in patched.text
    parsed = tomllib.loads(patched.text)
    assert lookup(parsed, runtime_table_path(2, HANDLER)) == RUNTIME.table()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("root = '/x'\n", "version 1, which is not supported"),
        ("version = 4\n", "version 4 is not supported"),
        ("version = true\n", "version True is not supported"),
        ("version = 2\n[plugins\n", "not valid TOML"),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncontainerd = "x"\n',
            "a value, not a table, at plugins.io.containerd.grpc.v1.cri.containerd",
        ),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = {}\n',
            "cannot be appended",
        ),
    ],
)
def test_unusable_configs_are_refused(text: str, message: str) -> None:
    with pytest.raises(ContainerdConfigError, match=re.escape(message)):
        patch_containerd_config(text, RUNTIME)


def test_a_comment_only_file_gets_a_version() -> None:
    patched = patch_containerd_config("# nothing here yet\n", RUNTIME)
    assert patched.text.startswith("# nothing here yet\nversion = 2\n")
    assert patched.version == 2
