"""The Linux ioctl plumbing that `/dev/sev-guest` and `/dev/tdx_guest` share.

The request numbers are computed here with the kernel's `_IOWR` macro (include/uapi/asm-generic/
ioctl.h) rather than copied as magic numbers, so a reader can check them against the C headers.
The system call itself is a parameter (`Ioctl`), so tests can record the exact bytes a driver
would see and answer with canned responses.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from contrast.attestation.errors import EvidenceUnavailable, Reason

# asm-generic/ioctl.h: nr (8 bits) | type (8 bits) | size (14 bits) | direction (2 bits).
_IOC_NRSHIFT = 0
_IOC_TYPESHIFT = 8
_IOC_SIZESHIFT = 16
_IOC_DIRSHIFT = 30
_IOC_SIZEMASK = (1 << 14) - 1
_IOC_WRITE = 1
_IOC_READ = 2

# An ioctl: (file descriptor, request number, argument buffer) -> return value. The buffer is
# mutated in place, exactly like `fcntl.ioctl(fd, request, buffer, True)`; failure raises OSError
# (and, as with the real call, the buffer still holds what the driver wrote back).
Ioctl = Callable[[int, int, bytearray], int]


def iowr(kind: str, number: int, size: int) -> int:
    """`_IOWR(kind, number, size)`: a read-write ioctl whose argument is `size` bytes."""
    if not 0 <= size <= _IOC_SIZEMASK:
        raise ValueError(f"ioctl argument size {size} does not fit in 14 bits")
    return (
        ((_IOC_READ | _IOC_WRITE) << _IOC_DIRSHIFT)
        | (size << _IOC_SIZESHIFT)
        | (ord(kind) << _IOC_TYPESHIFT)
        | (number << _IOC_NRSHIFT)
    )


def system_ioctl(descriptor: int, request: int, argument: bytearray) -> int:
    """The real system call, with the argument buffer mutated in place."""
    result: int = fcntl.ioctl(descriptor, request, argument, True)
    return result


@contextmanager
def open_device(device: Path) -> Iterator[int]:
    """Open a TEE guest device read-write (both drivers require it), closing it afterwards."""
    try:
        descriptor = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError as error:
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED,
            f"cannot open {device}: {error.strerror or error}",
            hint="the guest device needs root (or membership of its group)",
        ) from None
    try:
        yield descriptor
    finally:
        os.close(descriptor)
