"""`contrast servicemesh`: the sidecar's Envoy bootstrap, and the sidecar entrypoint itself."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from contrast import logs
from contrast.servicemesh import envoy, iptables, sidecar
from contrast.servicemesh.annotations import parse_egress, parse_ingress


def register(commands: Any) -> None:
    parser = commands.add_parser("servicemesh", help="the service-mesh sidecar (Envoy)")
    sub = parser.add_subparsers(dest="servicemesh_command", metavar="COMMAND", required=True)

    config = sub.add_parser(
        "envoy-config", help="print the Envoy bootstrap for the given annotations"
    )
    config.add_argument("--ingress", default="", help="servicemesh-ingress annotation value")
    config.add_argument("--egress", default="", help="servicemesh-egress annotation value")
    config.add_argument("--admin-port", type=int, help="serve Envoy's admin interface here")
    config.add_argument("--tls-dir", type=Path, default=envoy.DEFAULT_TLS_DIR)
    config.add_argument("--iptables", action="store_true", help="print the iptables rules instead")
    config.set_defaults(run=run_config)

    run = sub.add_parser(
        "run",
        help="sidecar entrypoint: write the bootstrap from the environment, redirect, exec Envoy",
        description=f"Reads {sidecar.INGRESS_ENV}, {sidecar.EGRESS_ENV} and"
        f" {sidecar.ADMIN_PORT_ENV}, writes the Envoy bootstrap, installs the iptables redirect"
        " (unless --local-upstream is given) and execs Envoy.",
    )
    run.add_argument("--config-path", type=Path, default=Path("/envoy-config.yml"))
    run.add_argument("--tls-dir", type=Path, default=envoy.DEFAULT_TLS_DIR)
    run.add_argument("--envoy", help="Envoy binary (default: envoy on PATH)")
    local = run.add_argument_group(
        "local platform", "no iptables: fixed ingress ports forwarding to the workload's port"
    )
    local.add_argument("--local-upstream", type=int, metavar="PORT")
    local.add_argument("--listen-address", default="127.0.0.1")
    local.add_argument("--mtls-port", type=int, default=envoy.MTLS_PORT)
    local.add_argument("--tls-port", type=int, default=envoy.TLS_PORT)
    run.set_defaults(run=run_sidecar)


def run_config(arguments: argparse.Namespace) -> int:
    ingress = parse_ingress(arguments.ingress)
    if arguments.iptables:
        print("\n".join(f"iptables -t mangle {rule}" for rule in iptables.rules(ingress)))
        return 0
    document = envoy.bootstrap(
        egress=parse_egress(arguments.egress),
        tls_dir=arguments.tls_dir,
        admin_port=arguments.admin_port,
    )
    print(json.dumps(document, indent=2))
    return 0


def run_sidecar(arguments: argparse.Namespace) -> int:
    logs.configure(json_lines=os.environ.get("CONTRAST_LOG_FORMAT", "json") == "json")
    config = sidecar.SidecarConfig.from_environment(os.environ)
    local = None
    if arguments.local_upstream is not None:
        local = envoy.Local(
            arguments.listen_address, arguments.mtls_port, arguments.tls_port,
            arguments.local_upstream,
        )  # fmt: skip
    sidecar.write_bootstrap(config, arguments.config_path, tls_dir=arguments.tls_dir, local=local)
    if local is None:
        sidecar.install_redirect(config)
    sidecar.exec_envoy(arguments.config_path, arguments.envoy)
    return 0
