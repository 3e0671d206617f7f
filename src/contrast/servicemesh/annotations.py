"""The `servicemesh-ingress` / `servicemesh-egress` annotation syntax of the original.

Entries are joined by `##`, fields by `#` (research/contrast.md §9.1):
- ingress `name#port#disableTLS`: `true` exempts the port from the mesh (plain text), `false`
  terminates TLS without requiring a client certificate; ports not listed require mutual TLS.
- egress `name#listenIP:port#remoteHost:port`: the app dials the loopback listener, the sidecar
  dials the remote with its mesh certificate. The listen address must be in 127.0.0.0/8.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from contrast.errors import ContrastError

ENTRY_SEPARATOR = "##"
FIELD_SEPARATOR = "#"
NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


class ServiceMeshError(ContrastError):
    """A malformed annotation entry or an invalid sidecar setup."""


@dataclass(frozen=True)
class IngressEntry:
    name: str
    port: int
    disable_tls: bool


@dataclass(frozen=True)
class EgressEntry:
    name: str
    listen_address: str
    listen_port: int
    remote_host: str
    remote_port: int


def _entries(text: str, annotation: str) -> list[tuple[int, list[str]]]:
    if not text.strip():
        return []
    return [
        (index, entry.split(FIELD_SEPARATOR))
        for index, entry in enumerate(text.strip().split(ENTRY_SEPARATOR), start=1)
    ]


def _error(
    annotation: str, index: int, entry: list[str], problem: str, form: str
) -> ServiceMeshError:
    return ServiceMeshError(
        f"{annotation} entry {index} ({FIELD_SEPARATOR.join(entry)!r}): {problem}",
        hint=f"each entry is {form}, entries are joined by {ENTRY_SEPARATOR!r}",
    )


def _port(text: str) -> int | None:
    if not text.isdigit():
        return None
    port = int(text)
    return port if 0 < port < 65536 else None


def _host_port(text: str) -> tuple[str, int] | None:
    host, separator, port_text = text.rpartition(":")
    port = _port(port_text)
    if not separator or not host or port is None:
        return None
    return host.strip("[]"), port


def parse_ingress(text: str) -> tuple[IngressEntry, ...]:
    """The ingress entries; an empty annotation means every port requires mutual TLS."""
    form = "name#port#disableTLS (true or false)"
    entries = []
    seen: set[int] = set()
    for index, fields in _entries(text, "servicemesh-ingress"):
        if len(fields) != 3:
            raise _error(
                "servicemesh-ingress", index, fields, f"has {len(fields)} fields, not 3", form
            )
        name, port_text, flag = fields
        if not NAME.fullmatch(name):
            raise _error("servicemesh-ingress", index, fields, f"name {name!r} is not valid", form)
        port = _port(port_text)
        if port is None:
            raise _error("servicemesh-ingress", index, fields, f"{port_text!r} is not a port", form)
        if flag not in ("true", "false"):
            raise _error(
                "servicemesh-ingress", index, fields, f"{flag!r} is not true or false", form
            )
        if port in seen:
            raise _error("servicemesh-ingress", index, fields, f"port {port} is listed twice", form)
        seen.add(port)
        entries.append(IngressEntry(name, port, flag == "true"))
    return tuple(entries)


def parse_egress(text: str) -> tuple[EgressEntry, ...]:
    """The egress entries; an empty annotation means no egress listeners."""
    form = "name#listenIP:port#remoteHost:port"
    entries = []
    seen: set[tuple[str, int]] = set()
    for index, fields in _entries(text, "servicemesh-egress"):
        if len(fields) != 3:
            raise _error(
                "servicemesh-egress", index, fields, f"has {len(fields)} fields, not 3", form
            )
        name, listen, remote = fields
        if not NAME.fullmatch(name):
            raise _error("servicemesh-egress", index, fields, f"name {name!r} is not valid", form)
        listen_parts, remote_parts = _host_port(listen), _host_port(remote)
        if listen_parts is None:
            raise _error("servicemesh-egress", index, fields, f"{listen!r} is not IP:port", form)
        if remote_parts is None:
            raise _error("servicemesh-egress", index, fields, f"{remote!r} is not host:port", form)
        try:
            address = ipaddress.ip_address(listen_parts[0])
        except ValueError:
            address = None
        if address is None or address not in LOOPBACK:
            raise _error(
                "servicemesh-egress", index, fields,
                f"listen address {listen_parts[0]!r} is not in 127.0.0.0/8", form,
            )  # fmt: skip
        if listen_parts in seen:
            raise _error("servicemesh-egress", index, fields, f"{listen} is used twice", form)
        seen.add(listen_parts)
        entries.append(EgressEntry(name, listen_parts[0], listen_parts[1], *remote_parts))
    return tuple(entries)
