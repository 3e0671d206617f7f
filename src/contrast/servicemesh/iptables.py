"""The mangle-table rules that send inbound TCP into the sidecar (research/contrast.md §9.3).

Loopback and established connections pass; ports whose ingress entry disables TLS pass; ports
with TLS but no client authentication go to 15007; everything else to 15006 (mutual TLS). The
rules are data here; the entrypoint applies them with `iptables-restore`, tests only read them.
"""

from __future__ import annotations

from collections.abc import Sequence

from contrast.servicemesh.annotations import IngressEntry
from contrast.servicemesh.envoy import MTLS_PORT, TLS_PORT

INBOUND = "CONTRAST_INBOUND"
REDIRECT = "CONTRAST_IN_REDIRECT"


def rules(ingress: Sequence[IngressEntry]) -> list[str]:
    """`iptables -t mangle` rules, one per line, without the leading `iptables -t mangle`."""
    lines = [
        f"-N {INBOUND}",
        f"-N {REDIRECT}",
        f"-A PREROUTING -p tcp -j {INBOUND}",
        f"-A {INBOUND} -p tcp -i lo -j RETURN",
        f"-A {INBOUND} -p tcp -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
    ]
    for entry in ingress:
        if entry.disable_tls:
            lines.append(f"-A {INBOUND} -p tcp --dport {entry.port} -j RETURN")
        else:
            lines.append(f"-A {INBOUND} -p tcp --dport {entry.port} -j TPROXY --on-port {TLS_PORT}")
    lines += [
        f"-A {INBOUND} -p tcp -j {REDIRECT}",
        f"-A {REDIRECT} -p tcp -j TPROXY --on-port {MTLS_PORT}",
    ]
    return lines


def restore_script(ingress: Sequence[IngressEntry]) -> str:
    """The rules as `iptables-restore --noflush` input for the mangle table."""
    return "*mangle\n" + "\n".join(rules(ingress)) + "\nCOMMIT\n"
