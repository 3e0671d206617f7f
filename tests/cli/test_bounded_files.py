"""Files the CLI reads from user paths are refused above their bound in one line (issue 24, 7).

`--share /dev/zero` used to read until the memory ran out ("internal error: MemoryError"), as
did `--seed`, `seed-shares.json` and every other file `set`, `verify` and `recover` read. Each
command runs in its own process with its address space limited, so that a reader without a
bound fails here with MemoryError instead of taking the machine's memory.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from contrast.atls.issuers import TeeKind
from contrast.client.workspace import load_seedshare_owner_public_key
from contrast.local.workspace import (
    SEEDSHARE_OWNERS,
    emulated_reference_values,
    write_workspace,
)
from contrast.seed.shares import SeedShareDocument
from tests import endless
from tests.cli.conftest import COORDINATOR, WEB

# Far above what a command needs (about 0.4 GiB of address space with grpc's threads), far
# below what reading /dev/zero whole would take.
ADDRESS_SPACE = 2 << 30
# Nothing listens there: every case is refused before the Coordinator is contacted.
COORDINATOR_ADDRESS = "127.0.0.1:1"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, tee_dir: Path) -> Path:
    """A workspace whose manifest needs two of three seed share owners, and its seed shares."""
    root = tmp_path_factory.mktemp("bounded") / "workspace"
    write_workspace(
        root,
        emulated_reference_values(TeeKind.EMULATED_SNP, tee_dir),
        [COORDINATOR, WEB],
        seedshare_owners=SEEDSHARE_OWNERS,
        seedshare_threshold=2,
    )
    owners = [load_seedshare_owner_public_key(root / name) for name in SEEDSHARE_OWNERS]
    document = SeedShareDocument.create(os.urandom(32), os.urandom(32), owners, threshold=2)
    (root / "seed-shares.json").write_bytes(document.to_json())
    return root


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _contrast(*arguments: str) -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "contrast", *arguments],
        capture_output=True,
        text=True,
        preexec_fn=_limit_memory,
        timeout=120,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr


def _assert_refused(
    arguments: list[str], path: Path | str, what: str, limit: str, hint: str
) -> None:
    code, out, err = _contrast(*arguments)
    assert (code, out) == (1, ""), err
    assert err == f"contrast: {what} {path} is larger than {limit}, the most accepted ({hint})\n"


@pytest.fixture
def endless_fifo(tmp_path: Path) -> Iterator[Path]:
    with endless.endless_fifo(tmp_path / "fifo") as path:
        yield path


@pytest.fixture
def sparse_file(tmp_path: Path) -> Path:
    path = tmp_path / "sparse"
    with path.open("wb") as file:
        file.truncate(8 << 30)
    return path


SHARE_HINT = "pass the file --decrypt-share-to wrote"


def test_a_share_of_dev_zero_is_refused(workspace: Path) -> None:
    _assert_refused(
        ["recover", "-c", COORDINATOR_ADDRESS, "--workspace-dir", str(workspace),
         "--share", "/dev/zero"],
        "/dev/zero", "the seed share", "8 KiB", SHARE_HINT,
    )  # fmt: skip


def test_a_share_from_an_endless_fifo_is_refused(workspace: Path, endless_fifo: Path) -> None:
    _assert_refused(
        ["recover", "-c", COORDINATOR_ADDRESS, "--workspace-dir", str(workspace),
         "--share", str(endless_fifo)],
        endless_fifo, "the seed share", "8 KiB", SHARE_HINT,
    )  # fmt: skip


def test_an_oversized_share_is_refused(workspace: Path, sparse_file: Path) -> None:
    _assert_refused(
        ["recover", "-c", COORDINATOR_ADDRESS, "--workspace-dir", str(workspace),
         "--share", str(sparse_file)],
        sparse_file, "the seed share", "8 KiB", SHARE_HINT,
    )  # fmt: skip


def test_a_seed_share_document_of_dev_zero_is_refused(workspace: Path) -> None:
    _assert_refused(
        ["recover", "-c", COORDINATOR_ADDRESS, "--workspace-dir", str(workspace),
         "--seed", "/dev/zero"],
        "/dev/zero", "the seed shares", "1 MiB", "pass the seed-shares.json contrast set wrote",
    )  # fmt: skip


def test_the_workspace_seed_shares_are_bounded_too(workspace: Path, tmp_path: Path) -> None:
    """`seed-shares.json` itself, here a link to an 8 GiB file, as `--decrypt-share-to` reads it."""
    copy = tmp_path / "workspace"
    copy.mkdir()
    for name in ("manifest.json", "seedshare-owner.pem"):
        (copy / name).write_bytes((workspace / name).read_bytes())
    huge = tmp_path / "huge"
    with huge.open("wb") as file:
        file.truncate(8 << 30)
    (copy / "seed-shares.json").symlink_to(huge)
    _assert_refused(
        ["recover", "--workspace-dir", str(copy), "--decrypt-share-to", str(tmp_path / "out")],
        copy / "seed-shares.json", "the seed shares", "1 MiB",
        "pass the seed-shares.json contrast set wrote",
    )  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_an_owner_key_of_dev_zero_is_refused(workspace: Path, tmp_path: Path) -> None:
    _assert_refused(
        ["recover", "--workspace-dir", str(workspace), "--seedshare-owner-key", "/dev/zero",
         "--decrypt-share-to", str(tmp_path / "out")],
        "/dev/zero", "the seed share owner key", "64 KiB",
        "pass the PEM key file contrast generate created",
    )  # fmt: skip


@pytest.mark.parametrize("command", ["set", "verify", "recover"])
def test_a_manifest_of_dev_zero_is_refused(workspace: Path, command: str) -> None:
    _assert_refused(
        [command, "-c", COORDINATOR_ADDRESS, "--workspace-dir", str(workspace),
         "-m", "/dev/zero"],
        "/dev/zero", "the manifest", "4 MiB", "run contrast generate first, or pass --manifest",
    )  # fmt: skip


def test_a_latest_transition_of_dev_zero_is_refused(workspace: Path, tmp_path: Path) -> None:
    copy = tmp_path / "workspace"
    copy.mkdir()
    (copy / "manifest.json").write_bytes((workspace / "manifest.json").read_bytes())
    (copy / "latest-transition").symlink_to("/dev/zero")
    code, out, err = _contrast("verify", "-c", COORDINATOR_ADDRESS, "--workspace-dir", str(copy))
    assert (code, out) == (1, ""), err
    assert err.startswith(
        f"contrast: the latest transition {copy / 'latest-transition'} is larger than 1 KiB,"
        " the most accepted (restore it from a backup"
    )
    assert err.count("\n") == 1


# --- every other file a command reads from a path the user names ------------------------------


def _sparse(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk: one past a bound is refused by its size."""
    with path.open("wb") as file:
        file.truncate(size)
    return path


Case = tuple[list[str], str | None, str]  # arguments, file for stdin, what the line must say


def _cases(workspace: Path, tmp: Path) -> dict[str, Case]:
    small = tmp / "small"
    small.write_bytes(b"\0" * 1184)
    resources = tmp / "resources"
    resources.mkdir()
    _sparse(resources / "big.yml", (256 << 20) + 1)
    generated = tmp / "generated"
    generated.mkdir()
    for name in ("rules.rego", "settings.json"):
        _sparse(generated / name, (16 << 20) + 1)
    only_manifest = tmp / "only-manifest"
    only_manifest.mkdir()
    _sparse(only_manifest / "manifest.json", (4 << 20) + 1)
    tdx = ["runtime", "reference-values", "--platform", "metal-qemu-tdx"]
    roots = tmp / "tee" / "snp" / "milan"
    roots.mkdir(parents=True)
    for name in ("ask.pem", "asvk.pem"):
        (roots / name).write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    _sparse(roots / "ark.pem", (1 << 20) + 1)
    return {
        "evidence": (
            ["evidence", "verify", "/dev/zero"],
            None,
            "the evidence /dev/zero is larger than 1 MiB",
        ),
        "evidence --cert": (
            ["evidence", "verify", "--format", "snp", str(small), "--cert", "/dev/zero"],
            None,
            "the certificate /dev/zero is larger than 1 MiB",
        ),
        "evidence --collateral": (
            ["evidence", "verify", "--format", "tdx", str(small), "--collateral", "/dev/zero"],
            None,
            "the collateral /dev/zero is larger than 16 MiB",
        ),
        "evidence --emulated-roots": (
            [
                "evidence",
                "verify",
                "--format",
                "snp",
                str(small),
                "--emulated-roots",
                str(tmp / "tee"),
            ],
            None,
            f"the emulated TEE's file {roots / 'ark.pem'} is larger than 1 MiB",
        ),
        "policy --policy": (
            ["policy", "evaluate", "--policy", "/dev/zero", "--request", str(small)],
            None,
            "the policy file /dev/zero is larger than 64 MiB",
        ),
        "policy --request": (
            ["policy", "evaluate", "--policy", str(small), "--request", "/dev/zero"],
            None,
            "the request file /dev/zero is larger than 64 MiB",
        ),
        "policy --request on stdin": (
            ["policy", "evaluate", "--policy", str(small), "--request", "-"],
            "/dev/zero",
            "the request on stdin is larger than 64 MiB",
        ),
        "reference-values --firmware": (
            [*tdx, "--firmware", "/dev/zero", "--kernel", str(small)],
            None,
            "the firmware /dev/zero is larger than 256 MiB",
        ),
        "reference-values --initrd": (
            [
                *tdx,
                "--firmware",
                str(small),
                "--kernel",
                str(small),
                "--initrd",
                str(_sparse(tmp / "initrd", (1 << 30) + 1)),
            ],
            None,
            "the initrd",
        ),
        "reference-values SNP --initrd": (
            [
                "runtime",
                "reference-values",
                "--platform",
                "metal-qemu-snp",
                "--firmware",
                str(small),
                "--kernel",
                str(small),
                "--initrd",
                str(_sparse(tmp / "snp-initrd", (1 << 30) + 1)),
            ],
            None,
            "the initrd",
        ),
        "reference-values --tdx-event-log": (
            [
                *tdx,
                "--firmware",
                str(small),
                "--kernel",
                str(small),
                "--tdx-event-log",
                "/dev/zero",
                str(small),
            ],
            None,
            "the TDX event log /dev/zero is larger than 16 MiB",
        ),
        "set's resources": (
            ["set", "-c", COORDINATOR_ADDRESS, "--workspace-dir", str(workspace), str(resources)],
            None,
            f"the resource file {resources / 'big.yml'} is larger than 256 MiB",
        ),
        "generate's YAML": (
            ["generate", "--workspace-dir", str(tmp), "/dev/zero"],
            None,
            "the YAML file /dev/zero is larger than 256 MiB",
        ),
        "generate's stdin": (
            ["generate", "--workspace-dir", str(tmp), "-"],
            "/dev/zero",
            "the YAML on stdin is larger than 256 MiB",
        ),
        "generate's rules": (
            ["generate", "--workspace-dir", str(generated), str(small)],
            None,
            f"the policy rules {generated / 'rules.rego'} is larger than 16 MiB",
        ),
        "generate's settings": (
            [
                "generate",
                "--workspace-dir",
                str(generated),
                "-p",
                str(tmp / "none.rego"),
                str(small),
            ],
            None,
            f"the settings file {generated / 'settings.json'} is larger than 16 MiB",
        ),
        "generate's manifest": (
            ["generate", "--workspace-dir", str(only_manifest), str(small)],
            None,
            f"the existing manifest {only_manifest / 'manifest.json'} is larger than 4 MiB",
        ),
    }


CASE_NAMES = [
    "evidence", "evidence --cert", "evidence --collateral", "evidence --emulated-roots",
    "policy --policy", "policy --request", "policy --request on stdin",
    "reference-values --firmware", "reference-values --initrd", "reference-values SNP --initrd",
    "reference-values --tdx-event-log",
    "set's resources",
    "generate's YAML", "generate's stdin", "generate's rules", "generate's settings",
    "generate's manifest",
]  # fmt: skip


@pytest.mark.parametrize("case", CASE_NAMES)
def test_every_file_a_command_reads_is_bounded(workspace: Path, tmp_path: Path, case: str) -> None:
    arguments, stdin, said = _cases(workspace, tmp_path)[case]
    with open(stdin or os.devnull, "rb") as source:
        result = subprocess.run(
            [sys.executable, "-m", "contrast", *arguments],
            stdin=source,
            capture_output=True,
            text=True,
            preexec_fn=_limit_memory,
            timeout=120,
            check=False,
        )
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("contrast: ")
    assert said in result.stderr
    assert ", the most accepted (" in result.stderr  # with what to do
