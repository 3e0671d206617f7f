"""The Envoy bootstrap the sidecar runs with (research/contrast.md §9.2).

In a pod, iptables sends inbound connections to two transparent listeners: 15006 requires a mesh
client certificate, 15007 only terminates TLS; both forward to the original destination. Outbound,
each egress entry is a loopback listener that originates mutual TLS to the remote service.

On the local (emulated) platform there is no iptables: `Local` replaces the transparent
listeners with ones on given ports that forward to the workload's port on loopback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contrast.servicemesh.annotations import EgressEntry, IngressEntry

MTLS_PORT = 15006
TLS_PORT = 15007
CERT_CHAIN = "certChain.pem"
KEY = "key.pem"
MESH_CA = "mesh-ca.pem"
DEFAULT_TLS_DIR = Path("/contrast/tls-config")
CONNECT_TIMEOUT = "5s"

_TLS_SOCKET = "envoy.transport_sockets.tls"
_TYPES = "type.googleapis.com/envoy.extensions"


@dataclass(frozen=True)
class Local:
    """Ingress for a workload running as a local process: fixed ports, one upstream."""

    listen_address: str
    mtls_port: int
    tls_port: int
    upstream_port: int


def _tcp_proxy(stat_prefix: str, cluster: str) -> dict[str, Any]:
    return {
        "name": "envoy.filters.network.tcp_proxy",
        "typed_config": {
            "@type": f"{_TYPES}.filters.network.tcp_proxy.v3.TcpProxy",
            "stat_prefix": stat_prefix,
            "cluster": cluster,
        },
    }


def _common_tls(tls_dir: Path) -> dict[str, Any]:
    return {
        "tls_params": {"tls_minimum_protocol_version": "TLSv1_2"},
        "tls_certificates": [
            {
                "certificate_chain": {"filename": str(tls_dir / CERT_CHAIN)},
                "private_key": {"filename": str(tls_dir / KEY)},
            }
        ],
        "validation_context": {"trusted_ca": {"filename": str(tls_dir / MESH_CA)}},
    }


def _downstream_tls(tls_dir: Path, *, require_client_certificate: bool) -> dict[str, Any]:
    return {
        "name": _TLS_SOCKET,
        "typed_config": {
            "@type": f"{_TYPES}.transport_sockets.tls.v3.DownstreamTlsContext",
            "require_client_certificate": require_client_certificate,
            "common_tls_context": _common_tls(tls_dir),
        },
    }


def _upstream_tls(tls_dir: Path) -> dict[str, Any]:
    return {
        "name": _TLS_SOCKET,
        "typed_config": {
            "@type": f"{_TYPES}.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": _common_tls(tls_dir),
        },
    }


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _static_cluster(name: str, host: str, port: int, *, dns: bool) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "type": "LOGICAL_DNS" if dns else "STATIC",
        "connect_timeout": CONNECT_TIMEOUT,
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(host, port)}}]}],
        },
    }
    if dns:
        cluster["dns_lookup_family"] = "V4_ONLY"
    return cluster


def _is_ip(host: str) -> bool:
    return all(part.isdigit() for part in host.split(".")) and host.count(".") == 3


def _transparent_ingress(tls_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    listeners = []
    for name, port, client_auth in (
        ("ingress", MTLS_PORT, True),
        ("ingressWithoutClientAuth", TLS_PORT, False),
    ):
        listeners.append(
            {
                "name": name,
                "address": _address("0.0.0.0", port),  # noqa: S104 - TPROXY target in the pod
                "transparent": True,
                "listener_filters": [
                    {
                        "name": "envoy.filters.listener.original_dst",
                        "typed_config": {
                            "@type": f"{_TYPES}.filters.listener.original_dst.v3.OriginalDst"
                        },
                    }
                ],
                "filter_chains": [
                    # A connection whose original destination is the listener itself was not
                    # redirected: dropping it stops a forwarding loop.
                    {
                        "filter_chain_match": {"destination_port": port},
                        "filters": [_tcp_proxy(f"{name}_loop", "BlackHoleCluster")],
                    },
                    {
                        "filters": [_tcp_proxy(name, "IngressCluster")],
                        "transport_socket": _downstream_tls(
                            tls_dir, require_client_certificate=client_auth
                        ),
                    },
                ],
            }
        )
    clusters = [
        {
            "name": "IngressCluster",
            "type": "ORIGINAL_DST",
            "lb_policy": "CLUSTER_PROVIDED",
            "connect_timeout": CONNECT_TIMEOUT,
        },
        {"name": "BlackHoleCluster", "type": "STATIC", "connect_timeout": "10s"},
    ]
    return listeners, clusters


def _local_ingress(
    tls_dir: Path, local: Local
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    listeners = [
        {
            "name": name,
            "address": _address(local.listen_address, port),
            "filter_chains": [
                {
                    "filters": [_tcp_proxy(name, "LocalWorkload")],
                    "transport_socket": _downstream_tls(
                        tls_dir, require_client_certificate=client_auth
                    ),
                }
            ],
        }
        for name, port, client_auth in (
            ("ingress", local.mtls_port, True),
            ("ingressWithoutClientAuth", local.tls_port, False),
        )
    ]
    return listeners, [
        _static_cluster("LocalWorkload", "127.0.0.1", local.upstream_port, dns=False)
    ]


def bootstrap(
    *,
    egress: Sequence[EgressEntry],
    tls_dir: Path = DEFAULT_TLS_DIR,
    admin_port: int | None = None,
    local: Local | None = None,
) -> dict[str, Any]:
    """The bootstrap as a JSON-ready dict (Envoy reads JSON as YAML).

    Ingress entries do not appear here: which port goes to which listener is decided by the
    iptables rules (`contrast.servicemesh.iptables`).
    """
    if local is None:
        listeners, clusters = _transparent_ingress(tls_dir)
    else:
        listeners, clusters = _local_ingress(tls_dir, local)
    for entry in egress:
        listeners.append(
            {
                "name": f"egress-{entry.name}",
                "address": _address(entry.listen_address, entry.listen_port),
                "filter_chains": [{"filters": [_tcp_proxy(f"egress_{entry.name}", entry.name)]}],
            }
        )
        cluster = _static_cluster(
            entry.name, entry.remote_host, entry.remote_port, dns=not _is_ip(entry.remote_host)
        )
        cluster["transport_socket"] = _upstream_tls(tls_dir)
        clusters.append(cluster)
    document: dict[str, Any] = {"static_resources": {"listeners": listeners, "clusters": clusters}}
    if admin_port is not None:
        document["admin"] = {"address": _address("0.0.0.0", admin_port)}  # noqa: S104
    return document


def ingress_summary(ingress: Sequence[IngressEntry]) -> list[str]:
    """How each listed port is treated, for logs and the CLI."""
    return [
        f"{entry.name}: port {entry.port} "
        + (
            "plain text (not redirected)"
            if entry.disable_tls
            else f"TLS without client auth ({TLS_PORT})"
        )
        for entry in ingress
    ]
