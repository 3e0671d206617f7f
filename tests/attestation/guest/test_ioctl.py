"""The ioctl adapter against the real system call, and the _IOWR arithmetic."""

from __future__ import annotations

import os
import termios
from pathlib import Path

import pytest

from contrast.attestation.errors import EvidenceUnavailable, Reason
from contrast.attestation.guest import ioctl


def test_iowr_encodes_direction_size_type_and_number() -> None:
    assert ioctl.iowr("S", 0, 32) == (3 << 30) | (32 << 16) | (ord("S") << 8)
    assert ioctl.iowr("T", 1, 1088) == 0xC4405401
    with pytest.raises(ValueError, match="14 bits"):
        ioctl.iowr("T", 1, 1 << 14)


def test_system_ioctl_mutates_the_buffer_in_place() -> None:
    # FIONREAD on a pipe: a harmless ioctl that writes an int into the argument buffer.
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"12345")
        buffer = bytearray(4)
        assert ioctl.system_ioctl(read_end, termios.FIONREAD, buffer) == 0
        assert int.from_bytes(buffer, "little") == 5
    finally:
        os.close(read_end)
        os.close(write_end)


def test_open_device_closes_and_reports_errors(tmp_path: Path) -> None:
    device = tmp_path / "device"
    device.touch()
    with ioctl.open_device(device) as descriptor:
        assert os.fstat(descriptor).st_size == 0
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(descriptor)
    with pytest.raises(EvidenceUnavailable) as raised, ioctl.open_device(tmp_path / "missing"):
        pass
    assert raised.value.reason is Reason.ISSUER_FAILED
    assert "No such file or directory" in str(raised.value)
