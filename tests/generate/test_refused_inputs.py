"""`generate` refuses a bad input before it writes anything (issue 24, 9).

A garbage `workload-owner.pem` used to be refused only after `seedshare-owner.pem` had been
created and `layers-cache.json` written. Every case here runs the command on a workspace that
has never been generated into (so that every file generate makes is still to be made), and
compares every file and directory below it, bytes and modes, before and after.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from contrast.cli.main import main
from contrast.client.workspace import generate_seedshare_owner_key, generate_workload_owner_key
from tests.generate.conftest import GenerateWorkspace

EMULATED = ("--reference-values", "emulated-snp")
Entry = tuple[str, int, bytes | None]  # (kind, mode, bytes or link target)


def _snapshot(root: Path) -> dict[str, Entry]:
    """Every path below `root`: directories, files with their bytes, links with their target."""
    entries: dict[str, Entry] = {}
    for directory, names, files in os.walk(root):
        for name in [*names, *files]:
            path = Path(directory) / name
            status = path.lstat()
            relative = str(path.relative_to(root))
            if stat.S_ISLNK(status.st_mode):
                entries[relative] = ("link", 0, os.readlink(path).encode())
            elif stat.S_ISDIR(status.st_mode):
                entries[relative] = ("directory", stat.S_IMODE(status.st_mode), None)
            else:
                entries[relative] = ("file", stat.S_IMODE(status.st_mode), path.read_bytes())
    return entries


def _ec_pem() -> bytes:
    return ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _rsa_2048_pem() -> bytes:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(name: str, data: bytes) -> Callable[[Path], list[str]]:
    def prepare(root: Path) -> list[str]:
        (root / name).write_bytes(data)
        return []

    return prepare


def _link(name: str, target: str) -> Callable[[Path], list[str]]:
    def prepare(root: Path) -> list[str]:
        (root / name).symlink_to(target)
        return []

    return prepare


def _arguments(*arguments: str) -> Callable[[Path], list[str]]:
    def prepare(root: Path) -> list[str]:
        return [argument.replace("WORKSPACE", str(root)) for argument in arguments]

    return prepare


CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    # The case: the seed share owner key does not exist yet, and would be created.
    "garbage workload owner key": (
        _write("workload-owner.pem", b"not a key\n"),
        "workload-owner.pem is not an unencrypted PEM private key",
    ),
    "garbage seed share owner key": (
        _write("seedshare-owner.pem", b"-----BEGIN RSA PRIVATE KEY-----\ngarbage\n"),
        "seedshare-owner.pem is not an unencrypted PEM private key",
    ),
    "RSA key as workload owner key": (
        _write("workload-owner.pem", _rsa_2048_pem()),
        "workload-owner.pem is not an ECDSA key",
    ),
    "ECDSA key as seed share owner key": (
        _write("seedshare-owner.pem", _ec_pem()),
        "seedshare-owner.pem is not an RSA key",
    ),
    "workload owner key of /dev/zero": (
        _link("workload-owner.pem", "/dev/zero"),
        "is larger than 64 KiB, the most accepted",
    ),
    "named workload owner key missing": (
        _arguments("--add-workload-owner-key", "WORKSPACE/missing.pem"),
        "missing.pem: No such file or directory",
    ),
    "named seed share owner key missing": (
        _arguments("--add-seedshare-owner-key", "WORKSPACE/missing.pem"),
        "missing.pem: No such file or directory",
    ),
    "broken rules": (
        _write("rules.rego", b"package agent_policy\n\ndefault x := \n"),
        "rules.rego",
    ),
    "broken settings": (_write("settings.json", b'{"cluster_config": '), "settings.json"),
    "not a manifest": (
        _write("manifest.json", b"[]\n"),
        "manifest.json: invalid manifest: not a JSON object",
    ),
    "threshold above the owners": (
        _arguments("--seedshare-threshold", "2"),
        "--seedshare-threshold 2 needs as many seed share owner keys, and there are 1",
    ),
    "disable updates with an owner": (
        _arguments("--disable-updates", "--add-workload-owner-key", "WORKSPACE/key.pem"),
        "--disable-updates and --add-workload-owner-key exclude each other",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_input_leaves_the_workspace_as_it_was(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    prepare, message = CASES[case]
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("emulated-snp")
    workspace.root.mkdir(parents=True, exist_ok=True)
    arguments = prepare(workspace.root)
    before = _snapshot(workspace.root)
    generated = {"layers-cache.json", "policy-cache.json", "schema-cache.json", "yaml-cache.txt"}
    assert not generated & set(before)  # nothing generated yet
    capsys.readouterr()
    assert workspace.generate(*EMULATED, *arguments, str(workspace.resources)) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("contrast: ")
    assert message in err
    assert _snapshot(workspace.root) == before


def test_without_a_coordinator_nothing_is_written(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused for what the resources lack before any image is read or key made."""
    workspace.add_example("sidecar-tls")
    before = _snapshot(workspace.root)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 1
    assert "no Coordinator among the confidential resources" in capsys.readouterr().err
    assert _snapshot(workspace.root) == before


def test_the_same_workspace_with_good_keys_generates(workspace: GenerateWorkspace) -> None:
    """The cases above fail for their input alone: with the keys in order, generate succeeds."""
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("emulated-snp")
    workspace.root.mkdir(parents=True, exist_ok=True)
    (workspace.root / "workload-owner.pem").write_bytes(generate_workload_owner_key())
    (workspace.root / "seedshare-owner.pem").write_bytes(generate_seedshare_owner_key())
    before = _snapshot(workspace.root)
    assert workspace.generate(*EMULATED, str(workspace.resources)) == 0
    after = _snapshot(workspace.root)
    assert after["workload-owner.pem"] == before["workload-owner.pem"]
    assert after["seedshare-owner.pem"] == before["seedshare-owner.pem"]
    assert "layers-cache.json" in after  # what the refused runs must not write
    assert "manifest.json" in after


def test_a_platform_without_reference_values_is_refused_before_any_image_is_read(
    workspace: GenerateWorkspace, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A real platform's values are only read: one the build lacks is refused first.

    (The emulated TEE's values are made with its state, which is created only once the images
    were read: a run refused for an image must not leave a new TEE behind either.)
    """
    workspace.add_example("sidecar-tls")
    workspace.add_coordinator("metal-qemu-snp")
    workspace.root.mkdir(parents=True, exist_ok=True)
    empty = tmp_path / "no-values.json"
    empty.write_text("{}\n")
    before = _snapshot(workspace.root)
    capsys.readouterr()
    code = main(
        ["generate", "--workspace-dir", str(workspace.root), "--oci-layout", str(workspace.layout),
         "--reference-values-file", str(empty), "--reference-values", "metal-qemu-snp",
         str(workspace.resources)]
    )  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "this build has no reference values for Metal-QEMU-SNP" in err
    assert err.count("\n") == 1
    assert _snapshot(workspace.root) == before
