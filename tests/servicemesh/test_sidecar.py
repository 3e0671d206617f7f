"""The sidecar entrypoint's steps, with the commands recorded instead of run."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from contrast.servicemesh.annotations import ServiceMeshError
from contrast.servicemesh.sidecar import (
    DEFAULT_DENY,
    SidecarConfig,
    install_redirect,
    write_bootstrap,
)


def test_configuration_comes_from_the_environment() -> None:
    config = SidecarConfig.from_environment(
        {
            "CONTRAST_INGRESS_PROXY_CONFIG": "metrics#8080#true",
            "CONTRAST_EGRESS_PROXY_CONFIG": "b#127.0.0.2:1#b:1",
            "CONTRAST_ADMIN_PORT": "9901",
        }
    )
    assert config == SidecarConfig("metrics#8080#true", "b#127.0.0.2:1#b:1", 9901)
    assert SidecarConfig.from_environment({}) == SidecarConfig("", "", None)
    with pytest.raises(ServiceMeshError, match="CONTRAST_ADMIN_PORT='x' is not a port"):
        SidecarConfig.from_environment({"CONTRAST_ADMIN_PORT": "x"})


def test_redirect_is_installed_before_the_default_deny_rule_goes() -> None:
    calls: list[tuple[list[str], str | None]] = []

    def record(argv: Sequence[str], stdin: str | None) -> None:
        calls.append((list(argv), stdin))

    install_redirect(SidecarConfig("metrics#8080#true", "", None), run=record)
    (restore, script), (delete, _) = calls
    assert restore == ["iptables-restore", "--noflush"]
    assert script is not None
    assert "-A CONTRAST_INBOUND -p tcp --dport 8080 -j RETURN" in script
    assert delete == ["iptables", "-D", *DEFAULT_DENY]


def test_a_missing_default_deny_rule_is_not_fatal() -> None:
    def fail_on_delete(argv: Sequence[str], stdin: str | None) -> None:
        if argv[0] == "iptables":
            raise subprocess.CalledProcessError(1, list(argv))

    install_redirect(SidecarConfig("", "", None), run=fail_on_delete)


def test_malformed_ingress_fails_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "envoy.json"
    with pytest.raises(ServiceMeshError):
        write_bootstrap(SidecarConfig("x#y#z", "", None), path, tls_dir=tmp_path)
    assert not path.exists()
    write_bootstrap(SidecarConfig("", "", 9901), path, tls_dir=tmp_path)
    assert json.loads(path.read_text())["admin"]["address"]["socket_address"]["port_value"] == 9901
