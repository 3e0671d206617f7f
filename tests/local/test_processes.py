"""Ports for the demo's processes: free, each handed out once, and never ephemeral."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from contrast.local import processes
from contrast.local.processes import free_port


def test_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    """A port from the ephemeral range could become an outgoing connection's source port before
    its process binds it (a Coordinator replica then failed with "Address already in use")."""
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(10000 <= port < ephemeral for port in ports)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", ports[-1]))  # still free


def test_a_taken_port_or_one_handed_out_before_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        given = free_port()
        candidates = iter([busy, given, given + 1 if given + 1 != busy else given + 2])
        monkeypatch.setattr(processes.random, "randrange", lambda *_: next(candidates))
        processes._handed_out.discard(given + 1)
        processes._handed_out.discard(given + 2)
        assert free_port() not in (busy, given)
