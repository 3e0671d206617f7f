"""`contrast set`, `verify` and `recover` against a real Coordinator server on loopback."""

from __future__ import annotations

import json
import logging
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.atls.issuers import EmulatedSnpIssuer
from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.cli.main import main
from contrast.initializer.client import Backoff, obtain_mesh_certificate
from tests.cli.conftest import ROGUE, WEB, Cluster
from tests.kuberesource.test_yamlbounds import SELF_REFERENCE, alias_bomb


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def contrast(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], command: str, *extra: str
) -> tuple[int, str, str]:
    workspace = str(cluster.workspace)
    arguments = [command, "-c", cluster.user_api, "--workspace-dir", workspace, *extra]
    if command == "set":
        arguments.append(str(cluster.workspace / "resources"))
    return run(capsys, *arguments)


def test_set_verify_recover(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = contrast(cluster, capsys, "set")
    assert (code, err) == (0, "")
    assert out.startswith("✔ Manifest set (first manifest)")
    shares = cluster.workspace / "seed-shares.json"
    assert stat.S_IMODE(shares.stat().st_mode) == 0o600

    code, out, _ = contrast(cluster, capsys, "verify")
    assert code == 0, out
    verify = cluster.workspace / "verify"
    manifest = (cluster.workspace / "manifest.json").read_bytes()
    assert (verify / "manifest.0.json").read_bytes() == manifest
    assert len(list(verify.glob("initdata.*.toml"))) == 2

    cluster.start()  # a restart: same state, no seed in memory
    code, _, err = contrast(cluster, capsys, "verify")
    assert code == 1
    assert "recovery mode" in err
    code, out, err = contrast(cluster, capsys, "recover")
    assert (code, out.strip()) == (0, "✔ Coordinator recovered"), err
    code, _, _ = contrast(cluster, capsys, "verify")
    assert code == 0


def test_verify_fails_when_the_active_manifest_is_not_the_local_one(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    path = cluster.workspace / "manifest.json"
    document = json.loads(path.read_bytes())
    path.write_text(json.dumps(document, indent=4))  # same content, other bytes
    code, _, err = contrast(cluster, capsys, "verify")
    assert code == 1
    assert "active manifest differs" in err
    assert (cluster.workspace / "verify" / "manifest.0.json").is_file()


def test_update_needs_the_owner_key(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    path = cluster.workspace / "manifest.json"
    document = json.loads(path.read_bytes())
    document["Policies"][WEB.policy_hash.hex()]["SANs"].append("web.example")
    path.write_text(json.dumps(document, indent=2) + "\n")
    stranger = cluster.workspace / "stranger.pem"
    stranger.write_bytes(
        ec.generate_private_key(ec.SECP384R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    code, _, err = contrast(cluster, capsys, "set", "--workload-owner-key", str(stranger))
    assert code == 1
    assert "PERMISSION_DENIED" in err
    assert "does not list as workload owner" in err
    code, out, err = contrast(cluster, capsys, "set")
    assert (code, err) == (0, "")
    assert "(update)" in out
    assert contrast(cluster, capsys, "verify")[0] == 0
    assert (cluster.workspace / "verify" / "manifest.1.json").is_file()


def test_a_coordinator_with_another_policy_is_not_trusted(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = contrast(cluster, capsys, "set", "--coordinator-policy-hash", "ab" * 32)
    assert code == 1
    assert "did not attest" not in err
    assert "policy hash: expected abab" in err
    assert not (cluster.workspace / "seed-shares.json").exists()  # nothing was sent


def test_resources_and_manifest_must_agree(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    (cluster.workspace / "resources" / "web.yml").unlink()
    code, _, err = contrast(cluster, capsys, "set")
    assert code == 1
    assert f"lists policy {WEB.policy_hash.hex()}" in err


def test_unreachable_coordinator_is_one_line(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(
        capsys, "verify", "-c", "127.0.0.1:1", "--workspace-dir", str(cluster.workspace)
    )
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert "cannot reach the Coordinator at 127.0.0.1:1" in err


def test_initializer_refused_for_unknown_policy_and_served_for_a_known_one(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    common = ["--tee", "emulated-snp", "--tee-state", str(cluster.tee_dir), "--deadline", "5"]
    rogue_files = tmp_path / "rogue"
    code, _, err = run(
        capsys, "initializer", *common, "--policy-hash", ROGUE.policy_hash.hex(),
        "--coordinator", cluster.mesh_api, "--output", str(rogue_files),
    )  # fmt: skip
    assert code == 1
    assert "PERMISSION_DENIED" in err
    assert not rogue_files.exists()

    web_files = tmp_path / "web"
    code, _, err = run(
        capsys, "initializer", *common, "--policy-hash", WEB.policy_hash.hex(),
        "--coordinator", cluster.mesh_api, "--output", str(web_files),
    )  # fmt: skip
    assert code == 0, err
    tls = web_files / "tls-config"
    result = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tls / "mesh-ca.pem"), str(tls / "certChain.pem")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("certChain.pem: OK")
    assert stat.S_IMODE((tls / "key.pem").stat().st_mode) == 0o400


def test_metrics_and_probes(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    http = f"http://127.0.0.1:{cluster.servers[-1].ports.http}"

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(http + path, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    assert get("/probe/readiness") == (503, "no manifest\n")
    assert contrast(cluster, capsys, "set")[0] == 0
    assert get("/probe/readiness") == (200, "ready\n")
    status, metrics = get("/metrics")
    assert status == 200
    assert "contrast_coordinator_manifest_generation 1.0" in metrics


def test_initializer_waits_for_the_manifest(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="contrast.initializer")
    issuer = EmulatedSnpIssuer(EmulatedSnp(cluster.tee_dir), WEB.policy_hash)
    result: list[object] = []
    backoff = Backoff(initial=0.05, maximum=0.2)
    waiting = threading.Thread(
        target=lambda: result.append(
            obtain_mesh_certificate(cluster.mesh_api, issuer, backoff=backoff, deadline=20)
        )
    )
    waiting.start()
    time.sleep(0.5)
    assert not result, "a certificate before any manifest was set"
    assert "waiting for the Coordinator" in caplog.text
    assert "no manifest is set" in caplog.text
    assert contrast(cluster, capsys, "set")[0] == 0
    waiting.join(timeout=20)
    assert len(result) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [(alias_bomb(9), "aliases expand"), (SELF_REFERENCE, "refers to itself")],
    ids=["alias bomb", "self-reference"],
)
def test_set_refuses_unbounded_yaml_before_connecting(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    (cluster.workspace / "resources" / "bomb.yml").write_text(text)
    code, out, err = contrast(cluster, capsys, "set")
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert "bomb.yml" in err
    assert message in err
    assert not (cluster.workspace / "seed-shares.json").exists()


BAD_FLAGS = [
    (["--coordinator-policy-hash", "zz"], "--coordinator-policy-hash 'zz'"),
    (["--coordinator-policy-hash", "ab" * 31], "64 hex digits"),
    (["--coordinator-policy-hash", "ab" * 32 + "0"], "64 hex digits"),
    (["--timeout", "nan"], "--timeout"),
    (["--timeout", "-1"], "--timeout"),
    (["--timeout", "0"], "--timeout"),
    (["--timeout", "inf"], "--timeout"),
    (["--timeout", "1e308"], "--timeout"),
]


@pytest.mark.parametrize("command", ["set", "verify", "recover"])
@pytest.mark.parametrize(("flags", "message"), BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_bad_flags_are_one_line_and_change_nothing(
    cluster: Cluster,
    capsys: pytest.CaptureFixture[str],
    command: str,
    flags: list[str],
    message: str,
) -> None:
    before = sorted(p.name for p in cluster.workspace.iterdir())
    code, out, err = contrast(cluster, capsys, command, *flags)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert "internal error" not in err
    assert message in err
    assert sorted(p.name for p in cluster.workspace.iterdir()) == before


def test_an_upper_case_policy_hash_is_the_same_hash(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.cli.conftest import COORDINATOR

    upper = COORDINATOR.policy_hash.hex().upper()
    code, _, err = contrast(cluster, capsys, "set", "--coordinator-policy-hash", upper)
    assert code == 0, err


def test_set_names_a_missing_resources_directory(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = cluster.workspace / "no-such-dir"
    code, _, err = run(
        capsys, "set", "-c", cluster.user_api, "--workspace-dir", str(cluster.workspace),
        str(missing),
    )  # fmt: skip
    assert code == 1
    assert f"{missing} is not a directory" in err


def test_verify_into_a_file_named_verify_is_one_line(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contrast(cluster, capsys, "set")[0] == 0
    (cluster.workspace / "verify").write_text("not a directory")
    code, _, err = contrast(cluster, capsys, "verify")
    assert code == 1
    assert err.count("\n") == 1
    assert "internal error" not in err
    assert "cannot write" in err


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"Salt": "00"}, "lacks SeedShares"),
        ({"SeedShares": [{"PublicKey": "k", "EncryptedSeed": "zz"}], "Salt": "00"}, "hex"),
        ({"SeedShares": 5, "Salt": "00"}, "SeedShares"),
    ],
    ids=["missing field", "not hex", "wrong type"],
)
def test_recover_explains_a_malformed_seed_share_document(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], document: object, message: str
) -> None:
    (cluster.workspace / "seed-shares.json").write_text(json.dumps(document))
    code, _, err = contrast(cluster, capsys, "recover")
    assert code == 1
    assert err.count("\n") == 1
    assert message in err
    assert "Error(" not in err  # no exception repr
