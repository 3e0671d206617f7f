"""What a `contrast evidence verify` process loads, run as a user runs it (a fresh interpreter).

Its start-up is most of its time (issue 14: ≤ 0.15 s on a 2-core machine). These tests keep out
what it once paid for without using it; `bench/bench_cli.py` measures the time itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from contrast.attestation.emulated.snp import EmulatedSnp
from tests.conftest import REPO

EXAMPLES = REPO / "examples" / "evidence"
SNP = EXAMPLES / "snp-milan-oak"
AT = "2025-02-01T00:00:00Z"
# The logging module (evidence verify logs nothing: `Command.logs`), importlib.resources with
# its tempfile and zipfile (AMD's roots are read from their folder), pkgutil, shutil (argparse's
# formatter is told the terminal's width), `Evidence` (only `tee` is needed), the other platform's
# verifier, the emulated TEE and the KDS client.
NEVER_ON_SNP = (
    "logging",
    "importlib.resources",
    "tempfile",
    "zipfile",
    "pkgutil",
    "shutil",
    "contrast.attestation.evidence",
    "contrast.attestation.tdx",
    "contrast.attestation.emulated",
    "contrast.attestation.snp.kds",
)
_MODULES = "--- modules ---"


def run(*arguments: str) -> tuple[int, str, str, set[str]]:
    """Exit code, stdout, stderr and the modules loaded of `contrast ARGUMENTS`."""
    probe = (
        "import sys\n"
        "from contrast.cli.main import main\n"
        "code = main(sys.argv[1:])\n"
        f"print({_MODULES!r}, *sorted(sys.modules), sep='\\n', file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, *arguments], capture_output=True, text=True, check=False
    )
    err, _, modules = result.stderr.partition(_MODULES)
    return result.returncode, result.stdout, err, set(modules.split())


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_snp_evidence_verifies_without_what_it_does_not_use() -> None:
    code, out, err, modules = run(
        "evidence", "verify", str(SNP / "report.bin"), "--cert", str(SNP / "vcek.der"),
        "--at", AT,
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert out.startswith("valid SNP evidence\n  version        3\n  product        Milan\n")
    assert loaded(modules, NEVER_ON_SNP) == []
    assert "json" not in modules  # only --output json needs it


def test_json_output_loads_json_and_still_no_logging() -> None:
    code, out, _, modules = run(
        "evidence", "verify", str(SNP / "report.bin"), "--cert", str(SNP / "vcek.der"),
        "--at", AT, "--output", "json",
    )  # fmt: skip
    assert code == 0
    assert '"verdict": "valid"' in out
    assert loaded(modules, NEVER_ON_SNP) == []


def test_a_refusal_loads_no_logging(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x01" * 100)
    code, out, err, modules = run("evidence", "verify", str(junk))
    assert (code, out) == (1, "")
    assert err.startswith("contrast: cannot tell what kind of evidence this is")
    assert "logging" not in modules


def test_tdx_evidence_verifies_without_logging_or_package_data_machinery() -> None:
    code, out, _, modules = run("evidence", "verify", str(EXAMPLES / "tdx-phala" / "quote.bin"))
    assert code == 0
    assert out.startswith("valid TDX evidence")
    assert loaded(modules, ("logging", "importlib.resources", "tempfile", "shutil")) == []


def test_emulated_evidence_verifies_without_logging(tmp_path: Path) -> None:
    tee = EmulatedSnp(tmp_path / "tee")
    report, (vcek,) = tee.issue(bytes(64))
    (tmp_path / "report.bin").write_bytes(report)
    (tmp_path / "vcek.der").write_bytes(vcek)
    code, out, _, modules = run(
        "evidence", "verify", str(tmp_path / "report.bin"), "--cert", str(tmp_path / "vcek.der"),
        "--emulated-roots", str(tmp_path / "tee"),
    )  # fmt: skip
    assert code == 0
    assert out.startswith("valid SNP evidence")
    assert "logging" not in modules


def test_debug_configures_logging_as_for_every_other_command() -> None:
    code, _, _, modules = run(
        "--debug", "evidence", "verify", str(SNP / "report.bin"), "--cert", str(SNP / "vcek.der"),
        "--at", AT,
    )  # fmt: skip
    assert code == 0
    assert "logging" in modules
