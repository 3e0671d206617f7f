"""The encrypted volume's cryptsetup steps, with the real `cryptsetup` on file-backed images.

This machine's kernel has no device-mapper, so what needs it cannot run here: formatting with
integrity (dm-integrity writes its superblock through a mapping) and opening. What does not need
it runs for real: the keyslot (Argon2id over the workload secret's key file), `--test-passphrase`,
the header copy and its check. The images here are therefore formatted with the original's
options minus the two integrity ones, and a test shows that the full command is refused here for
want of device-mapper, not for its arguments. Opening, mounting and writing inside a guest are
not tested here.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.initializer import cryptsetup
from contrast.initializer.cryptsetup import CryptsetupError, verify_header
from contrast.initializer.files import WORKLOAD_SECRET, WorkloadFiles
from contrast.seed.engine import SeedEngine

if shutil.which("cryptsetup") is None:
    pytest.fail("cryptsetup is missing: run scripts/system-deps.sh", pytrace=False)

# The original's format options (internal/cryptsetup Format), in its order.
ORIGINAL_OPTIONS = [
    "--type=luks2", "--cipher=aes-xts-plain64", "--pbkdf=argon2id", "--pbkdf-memory=10240",
    "--integrity=hmac-sha256", "--integrity-no-wipe", "--sector-size=4096", "--batch-mode",
]  # fmt: skip
NEEDS_DM = ("--integrity=hmac-sha256", "--integrity-no-wipe")
SEED = SeedEngine(bytes(range(64)), bytes(range(32)))


def key_file(directory: Path, workload_secret_id: str, engine: SeedEngine = SEED) -> Path:
    """The key file exactly as the Initializer writes it, for a pod with this ID."""
    files = WorkloadFiles(
        mesh_ca=b"", cert_chain=b"", root_ca=b"", key=ec.generate_private_key(ec.SECP256R1()),
        workload_secret=engine.workload_secret(workload_secret_id),
    )  # fmt: skip
    files.write(directory)
    return directory / WORKLOAD_SECRET


def image(path: Path) -> str:
    with path.open("wb") as file:
        file.truncate(32 << 20)
    return str(path)


def format_without_integrity(device: str, key: Path) -> None:
    command = [a for a in cryptsetup.format_command(device, key) if a not in NEEDS_DM]
    subprocess.run(command, check=True, capture_output=True)


def opens(device: str, key: Path, header: Path | None = None) -> bool:
    done = subprocess.run(
        cryptsetup.passphrase_check_command(device, key, header), capture_output=True, check=False
    )
    return done.returncode == 0


def dump(header: Path) -> dict[str, Any]:
    text = subprocess.run(
        ["cryptsetup", "luksDump", f"--header={header}", "--dump-json-metadata", "/dev/null"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    document: dict[str, Any] = json.loads(text)
    return document


def test_the_format_command_is_the_originals(tmp_path: Path) -> None:
    key = tmp_path / "key"
    assert cryptsetup.format_command("/dev/csi0", key) == [
        "cryptsetup", "luksFormat", *ORIGINAL_OPTIONS, f"--key-file={key}", "/dev/csi0"
    ]  # fmt: skip
    # printf /dev/csi0/state | sha256sum
    assert cryptsetup.mapping_name("/dev/csi0", "/state") == "7bfcd783e98dd63a"


def test_formatting_with_integrity_needs_device_mapper_here(tmp_path: Path) -> None:
    """The full command is refused here because dm-integrity cannot be set up, nothing else."""
    device = image(tmp_path / "disk.img")
    key = key_file(tmp_path, "apps/v1/StatefulSet/default/db")
    done = subprocess.run(
        cryptsetup.format_command(device, key), capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert "device-mapper" in done.stderr
    assert "Cannot format integrity" in done.stderr


def test_the_workload_secret_opens_the_volume_and_another_workloads_does_not(
    tmp_path: Path,
) -> None:
    device = image(tmp_path / "disk.img")
    mine = key_file(tmp_path / "db", "apps/v1/StatefulSet/default/db")
    format_without_integrity(device, mine)
    # A restart: the Coordinator derives the same secret for the same ID, the key file is new.
    again = key_file(tmp_path / "db-restarted", "apps/v1/StatefulSet/default/db")
    assert again.read_bytes() == mine.read_bytes()
    assert opens(device, again)
    # Another workload's secret, the same ID under another seed, and a changed workload-secret-id.
    others = [
        key_file(tmp_path / "web", "apps/v1/Deployment/default/web"),
        key_file(tmp_path / "other-seed", "apps/v1/StatefulSet/default/db", SeedEngine.generate()),
        key_file(tmp_path / "renamed", "my-workload-secret"),
    ]
    for other in others:
        assert other.read_bytes() != mine.read_bytes()
        assert not opens(device, other)
    # The passphrase is the key file's text (the secret's hex), as in the original.
    assert len(mine.read_text()) == 128


def test_a_header_copy_of_what_format_writes_is_checked_and_opens(tmp_path: Path) -> None:
    device = image(tmp_path / "disk.img")
    key = key_file(tmp_path, "core/v1/Pod/default/p")
    format_without_integrity(device, key)
    # Without integrity (all this machine can write) the copy is refused, as a host's
    # downgrade would be; the rest of the check passes on what `format` wrote.
    with pytest.raises(CryptsetupError, match="integrity") as raised:
        cryptsetup.header_copy(device, tmp_path / "shm")
    # Only what integrity adds is missing: the HMAC key and the segment's integrity.
    assert raised.value.message.split(": ", 1)[1].split("; ") == [
        "keyslot 0's key size is 64, not 96",
        "segment 0's integrity is None, not 'hmac(sha256)'",
        "segment 0's journal encryption is None, not 'none'",
        "segment 0's journal integrity is None, not 'none'",
    ]
    copy_path = next((tmp_path / "shm").iterdir())
    assert opens(device, key, copy_path)
    metadata = dump(copy_path)
    verify_header(with_integrity(metadata))


def with_integrity(metadata: dict[str, Any]) -> dict[str, Any]:
    """What `format` writes with dm: the HMAC key in the keyslot, integrity on the segment."""
    edited = copy.deepcopy(metadata)
    edited["keyslots"]["0"]["key_size"] = 96
    edited["segments"]["0"]["integrity"] = {
        "type": "hmac(sha256)", "journal_encryption": "none", "journal_integrity": "none",
    }  # fmt: skip
    return edited


def test_a_header_the_host_made_is_refused(tmp_path: Path) -> None:
    """A second keyslot the host knows, a null cipher, a weaker KDF: each refused by itself."""
    device = image(tmp_path / "disk.img")
    key = key_file(tmp_path, "core/v1/Pod/default/p")
    format_without_integrity(device, key)
    header = tmp_path / "header"
    subprocess.run(["cryptsetup", "luksHeaderBackup", device, "--header-backup-file",
                    str(header)], check=True, capture_output=True)  # fmt: skip
    good = with_integrity(dump(header))
    verify_header(good)
    host_key = tmp_path / "host-key"
    host_key.write_text("the host's own passphrase")
    add_key = ["cryptsetup", "luksAddKey", "--pbkdf=argon2id", "--pbkdf-memory=10240",
               f"--key-file={key}", device, str(host_key)]  # fmt: skip
    subprocess.run(add_key, check=True, capture_output=True)
    subprocess.run(["cryptsetup", "luksHeaderBackup", device, "--header-backup-file",
                    str(tmp_path / "two")], check=True, capture_output=True)  # fmt: skip
    assert opens(device, host_key)  # the attack works on an unchecked header
    two_slots = with_integrity(dump(tmp_path / "two"))
    edits = {
        "a second keyslot": two_slots,
        "a null cipher": _edit(good, ("segments", "0", "encryption"), "cipher_null-ecb"),
        "PBKDF2 instead of Argon2id": _edit(good, ("keyslots", "0", "kdf", "type"), "pbkdf2"),
        "a token": _edit(good, ("tokens",), {"0": {"type": "luks2-keyring"}}),
        "a journal without integrity": _edit(
            good, ("segments", "0", "integrity", "journal_integrity"), "crc32c"
        ),
    }
    for name, metadata in edits.items():
        with pytest.raises(CryptsetupError, match="not the one Contrast writes"):
            verify_header(metadata)
        assert name


def _edit(metadata: dict[str, Any], path: Sequence[str], value: Any) -> dict[str, Any]:
    edited = copy.deepcopy(metadata)
    node = edited
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return edited


def test_set_up_runs_the_originals_steps_in_order(tmp_path: Path) -> None:
    """The commands of a first start, on a device that is not LUKS yet (dm-less stand-in)."""
    key = key_file(tmp_path, "core/v1/Pod/default/p")
    calls: list[list[str]] = []
    header_json = json.dumps(with_integrity(_formatted_header(tmp_path)))

    def run(arguments: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(arguments))
        if arguments[:2] == ["cryptsetup", "isLuks"]:
            return subprocess.CompletedProcess(arguments, 1, "", "")
        if arguments[:2] == ["cryptsetup", "luksHeaderBackup"]:
            Path(arguments[-1]).write_bytes(cryptsetup.LUKS2_MAGIC + bytes(100))
        if arguments[:2] == ["cryptsetup", "luksDump"]:
            return subprocess.CompletedProcess(arguments, 0, header_json, "")
        if arguments[:3] == ["mkfs.ext4", "-F", "-n"]:
            plan = "Creating filesystem with 65536 1k blocks\nSuperblock backups stored on" \
                   " blocks: \n\t8193\n\n"  # fmt: skip
            return subprocess.CompletedProcess(arguments, 0, plan, "")
        return subprocess.CompletedProcess(arguments, 0, "", "")

    done = tmp_path / "done"
    mapping = cryptsetup.mapping_name("/dev/csi0", str(tmp_path / "state"))
    # The opened mapping as a file: unwritten (no ext4 magic), with something where mkfs.ext4
    # reads first (block 0, the backup superblock's block 8193), which is zeroed before it runs.
    mapped = tmp_path / "mapper" / mapping
    mapped.parent.mkdir()
    mapped.write_bytes(b"\xff" * (8194 * 1024))
    mapper = cryptsetup.set_up("/dev/csi0", tmp_path / "state", key, run=run,
                               header_directory=tmp_path / "shm", done_file=done,
                               mapper_directory=tmp_path / "mapper")  # fmt: skip
    assert mapper == mapped
    assert [c[:3] for c in calls] == [
        ["cryptsetup", "isLuks", "/dev/csi0"], ["cryptsetup", "luksFormat", "--type=luks2"],
        ["cryptsetup", "luksHeaderBackup", "/dev/csi0"], ["cryptsetup", "luksDump", calls[3][2]],
        ["cryptsetup", "luksOpen", calls[4][2]], ["mkfs.ext4", "-F", "-n"],
        ["mkfs.ext4", "-q", str(mapper)], ["mount", "-o", "sync,data=journal"],
    ]  # fmt: skip
    with mapped.open("rb") as written:
        assert written.read(1024) == bytes(1024)
        assert written.read(1024) == b"\xff" * 1024
        written.seek(8193 * 1024)
        assert written.read() == bytes(1024)
    assert calls[1] == cryptsetup.format_command("/dev/csi0", key)
    header = calls[2][-1]
    assert calls[4] == ["cryptsetup", "luksOpen", f"--header={header}", f"--key-file={key}",
                        "/dev/csi0", mapping]  # fmt: skip
    assert done.exists()
    assert all(key.read_text() not in " ".join(call) for call in calls)


def _formatted_header(tmp_path: Path) -> dict[str, Any]:
    device = image(tmp_path / "scratch.img")
    scratch_key = tmp_path / "scratch-key"
    scratch_key.write_text("scratch")
    format_without_integrity(device, scratch_key)
    header = tmp_path / "scratch-header"
    subprocess.run(["cryptsetup", "luksHeaderBackup", device, "--header-backup-file",
                    str(header)], check=True, capture_output=True)  # fmt: skip
    return dump(header)
