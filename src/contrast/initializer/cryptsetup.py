"""The encrypted persistent volume, as the Initializer sets it up (`secure-pv`, kuberesource/
securepv.py): LUKS2 with integrity on an untrusted block device, the workload secret as key.

The steps and every `cryptsetup` argument are the original's (internal/cryptsetup, called by its
Initializer when `CRYPTSETUP_DEVICE` is set):
- a device that is not LUKS yet is formatted: LUKS2, AES-XTS, Argon2id with 10 MiB of memory
  (so that it fits a small pod), HMAC-SHA256 integrity through dm-integrity without the initial
  wipe (unwritten sectors read as integrity errors until first written), 4 KiB sectors;
- the passphrase is the key file `/contrast/secrets/workload-secret-seed`, the hex text of the
  workload secret the Coordinator derives from its seed and the pod's workload secret ID: the
  same pod after a restart opens the device again, a pod with another ID (or another
  deployment's seed) cannot;
- before opening, the header is copied to memory (`luksHeaderBackup`) and checked field by field
  (`verify_header`), and the device is opened with that copy: the host owns the disk and could
  otherwise hand the pod a header of its own making (a second keyslot it knows, no integrity,
  `cipher_null`), and a copy cannot change between the check and the use;
- the mapping (`/dev/mapper/<sha256(device + mount point)[:8] hex>`) gets ext4 if it has no file
  system, is mounted on the mount point (`sync,data=journal`), and `/done` tells the startup
  probe. As in the original (internal/mount), a fresh mapping is never probed with `blkid` and
  never read before it is written: with `--integrity-no-wipe` every unwritten sector fails its
  integrity check, so `blkid` sees nothing and `mkfs.ext4` fails with an I/O error when it reads
  the block its superblock goes into (found booting a Debian kernel, tests/kvmguest). Only the
  ext4 magic is read (an I/O error means "not ext4"), and the blocks `mkfs.ext4 -n` names for
  the superblock and its backups are written with zeros first.

`cryptsetup` runs as a program, as in the original; `run` is injectable so that the commands can
be checked, but the tests run the real program on file-backed images wherever device-mapper is
not needed (formatting with integrity and opening are; the keyslot is not).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from contrast.initializer.errors import InitializerError

CRYPTSETUP = "cryptsetup"
PBKDF_MEMORY_KIB = 10240
FORMAT_OPTIONS = (
    "--type=luks2",
    "--cipher=aes-xts-plain64",
    "--pbkdf=argon2id",
    f"--pbkdf-memory={PBKDF_MEMORY_KIB}",
    "--integrity=hmac-sha256",
    "--integrity-no-wipe",
    "--sector-size=4096",
    "--batch-mode",
)
HEADER_DIRECTORY = Path("/dev/shm/contrast-cryptsetup")  # noqa: S108 (the original's, in memory)
# What `generate` sets up in the pod (kuberesource/securepv.py reads these): the variable that
# names the device, and where the Initializer mounts it (the emptyDir, shared Bidirectional).
DEVICE_ENV = "CRYPTSETUP_DEVICE"
STATE_PATH = Path("/state")
DONE_FILE = Path("/done")
LUKS2_MAGIC = b"LUKS\xba\xbe\x00\x02"
MAPPER_DIRECTORY = Path("/dev/mapper")
EXT4_MAGIC_OFFSET = 1080  # the superblock at 1024, its magic 56 bytes in
EXT4_MAGIC = b"\x53\xef"

Run = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


class CryptsetupError(InitializerError):
    """The encrypted volume cannot be set up (never carries the key)."""


def _run(arguments: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(arguments), capture_output=True, text=True, check=False)  # noqa: S603
    except FileNotFoundError:
        raise CryptsetupError(
            f"{arguments[0]} is not installed in this image",
            hint="the Initializer's image needs cryptsetup-bin, e2fsprogs and mount for secure-pv",
        ) from None


def mapping_name(device: str, mount_point: str) -> str:
    """The device-mapper name, as the original derives it (stable across restarts)."""
    return hashlib.sha256((device + mount_point).encode()).digest()[:8].hex()


def format_command(device: str, key_file: Path) -> list[str]:
    return [CRYPTSETUP, "luksFormat", *FORMAT_OPTIONS, f"--key-file={key_file}", device]


def open_command(device: str, mapping: str, key_file: Path, header: Path) -> list[str]:
    return [CRYPTSETUP, "luksOpen", f"--header={header}", f"--key-file={key_file}", device, mapping]


def passphrase_check_command(device: str, key_file: Path, header: Path | None = None) -> list[str]:
    """Whether `key_file` opens a keyslot, without device-mapper (nothing is activated)."""
    detached = [f"--header={header}"] if header is not None else []
    return [CRYPTSETUP, "open", "--test-passphrase", *detached, f"--key-file={key_file}", device]


def _checked(run: Run, arguments: Sequence[str], what: str) -> str:
    done = run(arguments)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise CryptsetupError(f"{what} failed: {detail[-1] if detail else done.returncode}")
    return done.stdout


def is_luks(device: str, run: Run = _run) -> bool:
    done = run([CRYPTSETUP, "isLuks", device])
    if done.returncode == 1:
        return False
    if done.returncode != 0:
        raise CryptsetupError(f"cannot tell whether {device} is LUKS: {done.stderr.strip()}")
    return True


def verify_header(metadata: Mapping[str, Any]) -> None:
    """Refuse a LUKS2 header (`luksDump --dump-json-metadata`) other than the one `format` makes.

    The same fields as the original's `verifyHeader`: one keyslot, Argon2id, AES-XTS with a
    512-bit key plus the 256-bit HMAC key, one crypt segment with HMAC-SHA256 integrity and no
    journal tricks, one PBKDF2 digest binding the two, no tokens.
    """
    problems: list[str] = []

    def expect(what: str, actual: Any, wanted: Any) -> None:
        if actual != wanted:
            problems.append(f"{what} is {actual!r}, not {wanted!r}")

    keyslots = metadata.get("keyslots") or {}
    expect("the number of keyslots", len(keyslots), 1)
    slot = keyslots.get("0") or {}
    expect("keyslot 0's type", slot.get("type"), "luks2")
    expect("keyslot 0's key size", slot.get("key_size"), 96)
    area = slot.get("area") or {}
    expect("keyslot 0's area type", area.get("type"), "raw")
    expect("keyslot 0's area encryption", area.get("encryption"), "aes-xts-plain64")
    expect("keyslot 0's area key size", area.get("key_size"), 64)
    splitter = slot.get("af") or {}
    expect("keyslot 0's splitter", (splitter.get("type"), splitter.get("stripes"),
                                    splitter.get("hash")), ("luks1", 4000, "sha256"))  # fmt: skip
    kdf = slot.get("kdf") or {}
    expect("keyslot 0's KDF", kdf.get("type"), "argon2id")
    if not kdf.get("salt"):
        problems.append("keyslot 0 has no KDF salt")
    segments = metadata.get("segments") or {}
    expect("the number of segments", len(segments), 1)
    segment = segments.get("0") or {}
    expect("segment 0's type", segment.get("type"), "crypt")
    expect("segment 0's flags", segment.get("flags") or [], [])
    expect("segment 0's IV tweak", segment.get("iv_tweak"), "0")
    expect("segment 0's encryption", segment.get("encryption"), "aes-xts-plain64")
    integrity = segment.get("integrity") or {}
    expect("segment 0's integrity", integrity.get("type"), "hmac(sha256)")
    expect("segment 0's journal encryption", integrity.get("journal_encryption"), "none")
    expect("segment 0's journal integrity", integrity.get("journal_integrity"), "none")
    digests = metadata.get("digests") or {}
    expect("the number of digests", len(digests), 1)
    digest = digests.get("0") or {}
    expect("digest 0's type", digest.get("type"), "pbkdf2")
    expect("digest 0's keyslots", digest.get("keyslots"), ["0"])
    expect("digest 0's segments", digest.get("segments"), ["0"])
    expect("digest 0's hash", digest.get("hash"), "sha256")
    if not digest.get("salt") or not digest.get("digest"):
        problems.append("digest 0 has no salt or digest")
    expect("the number of tokens", len(metadata.get("tokens") or {}), 0)
    if problems:
        raise CryptsetupError(
            f"the volume's LUKS header is not the one Contrast writes: {'; '.join(problems)}",
            hint="the host may have replaced it; the device is not opened",
        )


def header_copy(device: str, directory: Path, run: Run = _run) -> Path:
    """The device's header, copied to `directory` (memory) and checked there."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"luks-header-{os.urandom(4).hex()}"
    _checked(
        run,
        [CRYPTSETUP, "luksHeaderBackup", device, "--header-backup-file", str(path)],
        "copying the LUKS header",
    )
    with path.open("rb") as header:
        if header.read(len(LUKS2_MAGIC)) != LUKS2_MAGIC:
            raise CryptsetupError("the volume's header is not a LUKS2 header")
    text = _checked(
        run,
        [CRYPTSETUP, "luksDump", f"--header={path}", "--dump-json-metadata", "/dev/null"],
        "reading the LUKS header",
    )
    try:
        metadata = json.loads(text)
    except ValueError as error:
        raise CryptsetupError(f"cryptsetup printed no JSON header: {error}") from None
    verify_header(metadata)
    return path


def is_ext4(mapper: str) -> bool:
    """Whether the ext4 magic is there; an unwritten (integrity-failing) block means no."""
    try:
        with open(mapper, "rb") as device:
            device.seek(EXT4_MAGIC_OFFSET)
            return device.read(len(EXT4_MAGIC)) == EXT4_MAGIC
    except OSError as error:
        if error.errno == errno.EIO:
            return False
        raise CryptsetupError(f"cannot read {mapper}: {error.strerror}") from None


def wipe_superblocks(mapper: str, run: Run = _run) -> None:
    """Zero block 0 and the superblock backups' blocks, which `mkfs.ext4` reads before writing.

    Whole blocks at block-aligned offsets are written without reading them first.
    """
    plan = _checked(run, ["mkfs.ext4", "-F", "-n", mapper], "planning the file system")
    size = re.search(r"with \d+ (\d+)k blocks", plan)
    if size is None:
        raise CryptsetupError(f"mkfs.ext4 -n printed no block size: {plan.strip()[-200:]!r}")
    block = int(size.group(1)) * 1024
    _, _, backups = plan.partition("Superblock backups stored on blocks:")
    numbers = {0, *(int(n) for n in re.findall(r"\d+", backups.split("\n\n")[0]))}
    descriptor = os.open(mapper, os.O_WRONLY)
    try:
        for number in sorted(numbers):
            os.pwrite(descriptor, bytes(block), number * block)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def set_up(
    device: str,
    mount_point: Path,
    key_file: Path,
    *,
    run: Run = _run,
    header_directory: Path = HEADER_DIRECTORY,
    done_file: Path = DONE_FILE,
    mapper_directory: Path = MAPPER_DIRECTORY,
) -> Path:
    """Format (first use), check, open and mount the volume; the mapper device it mounted."""
    if not key_file.is_file():
        raise CryptsetupError(f"no workload secret at {key_file}", hint="is the pod's secret set?")
    if not is_luks(device, run):
        _checked(run, format_command(device, key_file), "formatting the volume (luksFormat)")
    mapping = mapping_name(device, str(mount_point))
    header = header_copy(device, header_directory, run)
    _checked(run, open_command(device, mapping, key_file, header), "opening the volume")
    mapper = f"{mapper_directory}/{mapping}"
    if not is_ext4(mapper):
        wipe_superblocks(mapper, run)
        _checked(run, ["mkfs.ext4", "-q", mapper], "making the file system")
    mount_point.mkdir(parents=True, exist_ok=True)
    _checked(run, ["mount", "-o", "sync,data=journal", mapper, str(mount_point)],
             "mounting the volume")  # fmt: skip
    done_file.write_bytes(b"")
    return Path(mapper)


def serve(device: str, key_file: Path, mount_point: Path = STATE_PATH) -> None:
    """Set the volume up, then keep the mount until SIGTERM (the Initializer as a sidecar)."""
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    set_up(device, mount_point, key_file)
    signal.sigwait(stop)
