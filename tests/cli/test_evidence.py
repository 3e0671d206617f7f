"""`contrast evidence verify` end to end on the conformance vectors, through `main()`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.cli.main import main
from tests.conftest import ATTESTATION_DATA, REPO, Vector, expected_snp_claims, load_vectors

SNP_VECTORS = [v for v in load_vectors("snp") if v.expected["expected"] != "unverifiable"]
SNP_VECTORS = [v for v in SNP_VECTORS if "report" in v.expected["files"]]
TDX_VECTORS = load_vectors("tdx")


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def snp_arguments(vector: Vector) -> list[str]:
    files = vector.expected["files"]
    arguments = [str(vector.path / files["report"]), "--format", "snp"]
    arguments += ["--cert", str(vector.path / files["vcek"])]
    product = vector.expected.get("verify_with", {}).get("product")
    if product:
        arguments += ["--product", product]
    return [*arguments, "--at", vector.expected["valid_at"], "--output", "json"]


def tdx_arguments(vector: Vector) -> list[str]:
    arguments = [str(vector.path / vector.expected["files"]["quote"]), "--format", "tdx"]
    collateral: dict[str, Any] = vector.expected.get("collateral", {})
    for key in ("tcb_info", "qe_identity", "tcb_signing_chain", "pck_crl", "root_ca_crl"):
        if key in collateral:
            local = vector.path / Path(collateral[key]).name
            path = (
                local
                if key == "tcb_info" and local.exists()
                else ATTESTATION_DATA / collateral[key]
            )
            arguments += ["--collateral", str(path)]
    return [*arguments, "--at", vector.expected["valid_at"], "--output", "json"]


@pytest.mark.parametrize("vector", SNP_VECTORS, ids=lambda v: v.name)
def test_snp_vector_verdict_and_claims(vector: Vector, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "evidence", "verify", *snp_arguments(vector))
    result = json.loads(out)
    expected = vector.expected["expected"]
    if expected == "valid":
        assert (code, result["verdict"], result["reason"]) == (0, "valid", None)
        assert result["claims"] == expected_snp_claims(vector.expected["report"])
    else:
        assert code == 1
        assert result["verdict"] == "invalid"
        assert result["claims"] is None
        assert result["reason"] in vector.expected["all_failing_checks"]
        assert result["reason"] == expected


@pytest.mark.parametrize("vector", TDX_VECTORS, ids=lambda v: v.name)
def test_tdx_vector_verdict_and_claims(vector: Vector, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "evidence", "verify", *tdx_arguments(vector))
    result = json.loads(out)
    expected = vector.expected["expected"]
    if expected != "valid":
        assert (code, result["verdict"], result["reason"]) == (1, "invalid", expected)
        return
    assert (code, result["verdict"]) == (0, "valid")
    claims, td = result["claims"], vector.expected["td"]
    assert claims["version"] == vector.expected["quote"]["version"]
    assert claims["mr_td"] == td["mr_td"]
    assert claims["rtmrs"] == [td[f"rtmr{i}"] for i in range(4)]
    assert claims["mr_seam"] == td["mr_seam"]
    assert claims["report_data"] == td["report_data"]
    assert claims["td_attributes"] == td["td_attributes"]
    assert claims["xfam"] == td["xfam"]
    assert claims["mr_config_id"] == td["mr_config_id"]
    assert claims["fmspc"] == vector.expected["pck"]["fmspc"]
    combined = vector.expected.get("collateral", {}).get("combined_tcb_status")
    if combined is None:
        assert claims["tcb_status"] is None
    elif combined.startswith("TCB level not supported"):
        assert claims["tcb_status"] == "TcbLevelNotSupported"
    else:
        assert claims["tcb_status"] == combined


def test_bundled_example_verifies_without_at(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command: a genuine report whose VCEK is valid until 2032."""
    example = REPO / "examples" / "evidence" / "snp-milan-oak"
    code, out, _ = run(
        capsys,
        "evidence",
        "verify",
        str(example / "report.bin"),
        "--cert",
        str(example / "vcek.der"),
    )
    assert code == 0
    assert out.startswith("valid SNP evidence")
    assert "Milan" in out


def test_text_output_names_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    vector = next(v for v in SNP_VECTORS if v.name == "snp/neg-measurement-flipped")
    arguments = [a for a in snp_arguments(vector) if a not in ("--output", "json")]
    code, out, _ = run(capsys, "evidence", "verify", *arguments)
    assert code == 1
    assert out.startswith("invalid (bad_report_signature): ")


def test_missing_file_is_one_line_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "evidence", "verify", str(tmp_path / "nope.bin"))
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert "cannot read evidence" in err
    assert "Traceback" not in err


def test_undetectable_bytes_explain_what_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x01" * 100)
    code, _, err = run(capsys, "evidence", "verify", str(junk))
    assert code == 1
    assert "--format" in err


def test_bad_time_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["evidence", "verify", "x", "--at", "yesterday"])
    assert exit_info.value.code == 2
    assert "not an ISO 8601 time" in capsys.readouterr().err


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


@pytest.mark.parametrize("tee", ["snp", "tdx"])
def test_emulated_roots_from_a_directory_without_them_write_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tee: str
) -> None:
    # Verification only reads roots: an empty directory once got a fresh key hierarchy.
    evidence = tmp_path / "evidence.bin"
    evidence.write_bytes(bytes(1184) if tee == "snp" else bytes(1024))
    roots = tmp_path / "roots"
    roots.mkdir()
    code, out, err = run(
        capsys, "evidence", "verify", str(evidence), "--format", tee, "--emulated-roots", str(roots)
    )
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert f"no emulated {tee.upper()} roots in {roots}" in err
    assert _files(roots) == []


def test_emulated_snp_evidence_verifies_with_the_public_roots_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tee = EmulatedSnp(tmp_path / "tee")
    report, (vcek,) = tee.issue(bytes(64))
    (tmp_path / "report.bin").write_bytes(report)
    (tmp_path / "vcek.der").write_bytes(vcek)
    # What a data owner is given: the certificates, none of the private keys.
    public = tmp_path / "roots" / "snp" / "milan"
    public.mkdir(parents=True)
    for name in ("ark.pem", "ask.pem", "asvk.pem"):
        shutil.copy(tmp_path / "tee" / "snp" / "milan" / name, public / name)
    before = _files(tmp_path / "roots")
    code, out, err = run(
        capsys, "evidence", "verify", str(tmp_path / "report.bin"),
        "--cert", str(tmp_path / "vcek.der"), "--emulated-roots", str(tmp_path / "roots"),
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("valid SNP evidence")
    assert _files(tmp_path / "roots") == before
