"""Files from paths a user names, read with a bound on their size before they are held whole.

`Path.read_bytes()` reads until the end: `--share /dev/zero` never ends and fills the memory
(MemoryError), a FIFO whose writer keeps writing does the same, and a multi-gigabyte file given
by mistake is held whole before any check of its size. `read_bounded` refuses a regular file
whose size is over the bound from its `fstat`, without reading it, and reads anything else
(devices, pipes, FIFOs, a regular file that grows while it is read) only up to one byte past
the bound: at most that much is ever held, and refusing `/dev/zero` takes as long as reading
the bound's bytes.

The bound of each kind of file is next to its reader (`MANIFEST_LIMITS`, `SEED_SHARES_LIMITS`,
`PEM_MAX_BYTES`, ...), so each can say why it is what it is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO, TextIO

from contrast.errors import ContrastError

# A pipe or device is read in pieces of this size until the bound: it tells nothing of its size.
_PIECE = 1 << 16


class FileTooLarge(ContrastError):
    """A file is larger than its kind is ever accepted to be."""


def describe_size(size: int) -> str:
    """`size` bytes in the unit a person reads best: '8 KiB', '4 MiB', '300 bytes'."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} bytes"


def read_bounded(path: Path, max_bytes: int, *, what: str, hint: str | None = None) -> bytes:
    """The bytes of `path`, unless it holds more than `max_bytes`.

    `what` names the file in the message ("the seed share"), `hint` says what to do. Raises
    `FileTooLarge` for a file over the bound and OSError where it cannot be opened or read
    (callers word those themselves, as before).
    """
    with open(path, "rb", buffering=0) as file:
        data = _read_at_most(file, max_bytes)
    if data is None:
        raise too_large(path, max_bytes, what=what, hint=hint)
    return data


def read_stream_bounded(
    stream: BinaryIO, max_bytes: int, *, name: str, what: str, hint: str | None = None
) -> bytes:
    """`read_bounded` for an open stream (standard input); `name` names it in the message."""
    data = _read_at_most(stream, max_bytes)
    if data is None:
        raise too_large(name, max_bytes, what=what, hint=hint)
    return data


def check_size(path: Path, max_bytes: int, *, what: str, hint: str | None = None) -> None:
    """`read_bounded`'s refusal for a file another program reads itself, told by its size.

    Only a regular file is checked (its size is all there is to know before that program reads
    it); anything else is left to that program, which must refuse it.
    """
    if path.is_file() and path.stat().st_size > max_bytes:
        raise too_large(path, max_bytes, what=what, hint=hint)


def read_text_stream_bounded(
    stream: TextIO, max_bytes: int, *, name: str, what: str, hint: str | None = None
) -> str:
    """`read_stream_bounded` for a text stream without a byte buffer (a `StringIO`): at most
    `max_bytes` characters are accepted, and a text has at least as many bytes as characters."""
    text = stream.read(max_bytes + 1)
    if len(text) > max_bytes:
        raise too_large(name, max_bytes, what=what, hint=hint)
    return text


def too_large(path: Path | str, max_bytes: int, *, what: str, hint: str | None) -> FileTooLarge:
    return FileTooLarge(
        f"{what} {path} is larger than {describe_size(max_bytes)}, the most accepted",
        hint=hint,
    )


def _read_at_most(file: BinaryIO, max_bytes: int) -> bytes | None:
    """All of `file` if it holds at most `max_bytes`, else None (having read max_bytes + 1).

    A regular file is read with one request of its size (plus one byte, so that a file that
    grew is noticed), anything else in pieces: what is held never exceeds the bound by more
    than a byte, until the accepted pieces are joined.
    """
    want = _PIECE
    try:
        status = os.fstat(file.fileno())
    except (OSError, AttributeError, ValueError):  # a stream without a descriptor
        status = None
    if status is not None and stat.S_ISREG(status.st_mode):
        if status.st_size > max_bytes:
            return None
        want = status.st_size + 1
    pieces = []
    total = 0
    while total <= max_bytes:
        piece = file.read(min(want, max_bytes + 1 - total))
        if not piece:
            break
        pieces.append(piece)
        total += len(piece)
        want = _PIECE
    if total > max_bytes:
        return None
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)
