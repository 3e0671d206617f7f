"""`generate --emulated-tee DIR` with a node's exported public roots: certificates only.

The node installer's roots (`contrast-emulated-runtime setup`) keep their keys on the node; a
user takes the public part (`setup --public DIR`), as they take AMD's or Intel's roots. Generate
used to build an emulated TEE from the directory, which wrote a new key hierarchy where the keys
were missing: the manifest then trusted fresh roots that the node's evidence never chains to.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contrast.atls.issuers import TeeKind, make_issuer
from contrast.attestation.errors import AttestationError
from contrast.emulatedruntime.roots import ensure_roots, export_public
from contrast.manifest.model import Manifest
from contrast.manifest.verifier import workload_verifier
from tests.generate.conftest import GenerateWorkspace

REPORT_DATA = hashlib.sha512(b"a workload's key").digest()


def _tree(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def node_roots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The node's roots (with keys) and their exported public part."""
    directory = tmp_path_factory.mktemp("node")
    roots, public = directory / "roots", directory / "public"
    ensure_roots(roots)
    export_public(roots, public)
    return roots, public


@pytest.mark.parametrize(
    ("platform", "kind"),
    [("emulated-snp", TeeKind.EMULATED_SNP), ("emulated-tdx", TeeKind.EMULATED_TDX)],
)
def test_the_exported_roots_verify_the_nodes_evidence(
    workspace: GenerateWorkspace,
    capsys: pytest.CaptureFixture[str],
    node_roots: tuple[Path, Path],
    platform: str,
    kind: TeeKind,
) -> None:
    roots, public = node_roots
    before = _tree(public)
    workspace.add_coordinator(platform)
    code = workspace.generate(
        "--reference-values", platform, "--emulated-tee", str(public), str(workspace.resources)
    )
    assert code == 0, capsys.readouterr().err
    assert _tree(public) == before  # read, never written: no key appeared
    assert not any(name.endswith(".key") for name in before)
    manifest = Manifest.from_bytes((workspace.root / "manifest.json").read_bytes())
    (policy_hash,) = (bytes.fromhex(h) for h in workspace.manifest()["Policies"])
    # Evidence as the node's TEE gives a pod: signed with the node's keys, the pod's policy.
    evidence = make_issuer(kind, state_dir=roots, policy_hash=policy_hash).issue(REPORT_DATA)
    peer = workload_verifier(manifest).verify(
        evidence, report_data=REPORT_DATA, now=datetime.now(UTC)
    )
    assert peer.policy_hash == policy_hash


def test_fresh_roots_do_not_verify_the_nodes_evidence(
    workspace: GenerateWorkspace,
    capsys: pytest.CaptureFixture[str],
    node_roots: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    """The check above can fail: another TEE's roots (a new state) refuse the node's evidence."""
    roots, _ = node_roots
    workspace.add_coordinator("emulated-snp")
    code = workspace.generate(
        "--reference-values",
        "emulated-snp",
        "--emulated-tee",
        str(tmp_path / "new"),
        str(workspace.resources),
    )
    assert code == 0, capsys.readouterr().err
    manifest = Manifest.from_bytes((workspace.root / "manifest.json").read_bytes())
    (policy_hash,) = (bytes.fromhex(h) for h in workspace.manifest()["Policies"])
    evidence = make_issuer(TeeKind.EMULATED_SNP, state_dir=roots, policy_hash=policy_hash).issue(
        REPORT_DATA
    )
    with pytest.raises(AttestationError, match="not signed by the trusted"):
        workload_verifier(manifest).verify(evidence, report_data=REPORT_DATA, now=datetime.now(UTC))


@pytest.mark.parametrize(
    ("platform", "present", "message"),
    [
        ("emulated-snp", {}, "holds no emulated SNP roots"),
        ("emulated-tdx", {}, "holds no emulated TDX roots"),
        # Only the other TEE's roots, or part of them: nothing is made up for the rest.
        ("emulated-tdx", {"snp/milan/ark.pem": b"x"}, "holds no emulated TDX roots"),
        ("emulated-snp", {"tdx/chain.pem": b"x", "tdx/tcb_signing.pem": b"x"}, "no emulated SNP"),
        ("emulated-snp", {"snp/milan/ark.pem": b"x"}, "holds no emulated SNP roots"),
    ],
)
def test_a_directory_without_the_roots_is_refused_and_left_as_it_was(
    workspace: GenerateWorkspace,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    *,
    platform: str,
    present: dict[str, bytes],
    message: str,
) -> None:
    directory = tmp_path / "public"
    directory.mkdir()
    for name, data in present.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    workspace.add_coordinator(platform)
    capsys.readouterr()
    before = workspace.snapshot()
    code = workspace.generate(
        "--reference-values", platform, "--emulated-tee", str(directory), str(workspace.resources)
    )
    assert code != 0
    err = capsys.readouterr().err
    assert err.startswith(f"contrast: {directory} "), err
    assert message in err, err
    assert err.count("\n") == 1, err  # one line
    assert _tree(directory) == present
    assert sorted(p.name for p in directory.rglob("*") if p.is_file()) == sorted(
        Path(name).name for name in present
    )
    assert workspace.snapshot() == before
