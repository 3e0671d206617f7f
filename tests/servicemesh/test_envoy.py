"""Every bootstrap we produce passes `envoy --mode validate`; the iptables rules as the original."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contrast.cli.main import main
from contrast.servicemesh import envoy, iptables
from contrast.servicemesh.annotations import parse_egress, parse_ingress

ENVOY = str(Path(sys.executable).parent / "envoy")
LOCAL = envoy.Local("127.0.0.1", 16006, 16007, 8080)


def validate(document: dict[str, object], tmp_path: Path) -> None:
    path = tmp_path / "bootstrap.json"
    path.write_text(json.dumps(document))
    result = subprocess.run(
        [ENVOY, "--mode", "validate", "-c", str(path), "--disable-hot-restart"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"configuration '{path}' OK" in result.stdout + result.stderr


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mesh files as an Initializer writes them, from a real CA hierarchy."""
    from datetime import UTC, datetime

    from cryptography.hazmat.primitives.asymmetric import ec

    from contrast.ca.authority import CertificateAuthority
    from contrast.initializer.files import WorkloadFiles

    now = datetime.now(UTC)
    authority = CertificateAuthority.create(
        ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1()), now=now
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = authority.issue_mesh_certificate(key.public_key(), ["web", "*"], now=now)
    from cryptography.hazmat.primitives.serialization import Encoding

    directory = tmp_path_factory.mktemp("contrast")
    WorkloadFiles(
        authority.mesh_ca_pem,
        leaf.public_bytes(Encoding.PEM) + authority.intermediate_pem,
        authority.root_pem,
        key,
        None,
    ).write(directory)
    return directory / "tls-config"


@pytest.mark.parametrize(
    ("egress", "admin_port", "local"),
    [
        ("", None, None),
        ("backend#127.0.0.2:4001#backend.default:4001", 9901, None),
        ("db#127.0.0.3:5432#10.1.2.3:5432##api#127.0.0.4:80#api.example:443", None, None),
        ("backend#127.0.0.2:4001#127.0.0.1:16006", None, LOCAL),
    ],
)
def test_bootstraps_pass_envoy_validate(
    egress: str, admin_port: int | None, local: envoy.Local | None, tls_dir: Path, tmp_path: Path
) -> None:
    document = envoy.bootstrap(
        egress=parse_egress(egress), tls_dir=tls_dir, admin_port=admin_port, local=local
    )
    validate(document, tmp_path)


def test_transparent_listeners_follow_the_original(tls_dir: Path) -> None:
    document = envoy.bootstrap(egress=(), tls_dir=tls_dir)
    resources: Any = document["static_resources"]
    listeners = {item["name"]: item for item in resources["listeners"]}
    assert set(listeners) == {"ingress", "ingressWithoutClientAuth"}
    expected = (("ingress", 15006, True), ("ingressWithoutClientAuth", 15007, False))
    for name, port, client_auth in expected:
        listener = listeners[name]
        assert listener["address"]["socket_address"]["port_value"] == port
        assert listener["transparent"] is True
        loop_guard, proxied = listener["filter_chains"]
        assert loop_guard["filter_chain_match"] == {"destination_port": port}
        tls = proxied["transport_socket"]["typed_config"]
        assert tls["require_client_certificate"] is client_auth
        assert tls["common_tls_context"]["validation_context"]["trusted_ca"]["filename"].endswith(
            "mesh-ca.pem"
        )


def test_iptables_rules_for_the_documented_example() -> None:
    rules = iptables.rules(parse_ingress("main#8001#false##metrics#8080#true"))
    assert rules == [
        "-N CONTRAST_INBOUND",
        "-N CONTRAST_IN_REDIRECT",
        "-A PREROUTING -p tcp -j CONTRAST_INBOUND",
        "-A CONTRAST_INBOUND -p tcp -i lo -j RETURN",
        "-A CONTRAST_INBOUND -p tcp -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
        "-A CONTRAST_INBOUND -p tcp --dport 8001 -j TPROXY --on-port 15007",
        "-A CONTRAST_INBOUND -p tcp --dport 8080 -j RETURN",
        "-A CONTRAST_INBOUND -p tcp -j CONTRAST_IN_REDIRECT",
        "-A CONTRAST_IN_REDIRECT -p tcp -j TPROXY --on-port 15006",
    ]
    assert iptables.restore_script(()).startswith("*mangle\n")
    assert iptables.restore_script(()).endswith("COMMIT\n")


def test_cli_prints_a_valid_bootstrap(
    capsys: pytest.CaptureFixture[str], tls_dir: Path, tmp_path: Path
) -> None:
    code = main([
        "servicemesh", "envoy-config", "--ingress", "main#8001#false##metrics#8080#true",
        "--egress", "backend#127.0.0.2:4001#backend.default:4001", "--tls-dir", str(tls_dir),
    ])  # fmt: skip
    assert code == 0
    validate(json.loads(capsys.readouterr().out), tmp_path)


def test_cli_rejects_a_malformed_annotation_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["servicemesh", "envoy-config", "--egress", "backend#10.0.0.1:1#x:1"])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "not in 127.0.0.0/8" in captured.err
