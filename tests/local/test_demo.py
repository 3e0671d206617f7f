"""The README's first command: the whole flow, as local processes, on both emulated TEEs."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from contrast.atls.issuers import TeeKind
from contrast.local.demo import run_demo

STEPS = 17


@pytest.mark.parametrize("tee", [TeeKind.EMULATED_SNP, TeeKind.EMULATED_TDX])
def test_demo_runs_end_to_end_and_leaves_its_files(tmp_path: Path, tee: TeeKind) -> None:
    lines: list[str] = []
    run_demo(tmp_path, tee=tee, say=lines.append)
    steps = [line for line in lines if "✔" in line]
    assert len(steps) == STEPS, lines
    assert any("over mutual TLS: HTTP 200: hello from web" in line for line in steps)
    assert any("without a mesh certificate is refused: refused" in line for line in steps)
    assert any("is not in the active manifest" in line for line in steps)
    assert any("with 2 of 3 seed share owners" in line for line in steps)
    verify = tmp_path / "verify"
    assert (verify / "manifest.0.json").read_bytes() == (tmp_path / "manifest.json").read_bytes()
    assert (verify / "mesh-ca.pem").is_file()
    assert (verify / "coordinator-root-ca.pem").is_file()
    for workload in ("web", "client", "late"):
        files = tmp_path / "workloads" / workload
        key = files / "tls-config" / "key.pem"
        assert stat.S_IMODE(key.stat().st_mode) == 0o400
        secret = files / "secrets" / "workload-secret-seed"
        assert len(secret.read_text()) == 128
    assert not (tmp_path / "workloads" / "rogue" / "tls-config").exists()
    assert stat.S_IMODE((tmp_path / "seed-shares.json").stat().st_mode) == 0o600
