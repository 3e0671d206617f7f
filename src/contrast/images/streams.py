"""Readers that check what they pass on: digests and sizes of blobs, gzip decompression.

Layers are read through a chain of these (blob → digest check → gunzip → diff_id check → tar), one
chunk at a time, so memory stays flat in the layer size and the digests come for free with the one
pass that reads the files.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import zlib
from collections.abc import Callable
from typing import Protocol, cast

from zlib_ng import zlib_ng

from contrast.images.model import ImageError

CHUNK_SIZE = 256 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 16 + zlib.MAX_WBITS
# How often a thread blocked on a full or empty queue looks whether it was told to stop.
_POLL_SECONDS = 0.1


# zlib-ng's stub declares `error` as an instance; at run time it is the module's exception class.
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, cast(type[Exception], zlib_ng.error))


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class DigestMismatch(ImageError):
    """A blob whose content does not hash to the digest that names it."""


class DigestingReader:
    """Pass bytes through while hashing and counting them; check digest and size at the end.

    `expected_size` (when known) is also an upper bound: a server that sends more is cut off
    rather than read forever.
    """

    def __init__(
        self,
        source: Readable,
        expected_digest: str,
        what: str,
        expected_size: int | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        self._source = source
        self._expected_digest = expected_digest
        self._expected_size = expected_size
        self._what = what
        self._on_bytes = on_bytes
        self._hash = hashlib.sha256()
        self.size = 0
        self.finished = False

    def read(self, size: int = -1, /) -> bytes:
        if self.finished:
            return b""
        data = self._source.read(CHUNK_SIZE if size is None or size < 0 else size)
        if data:
            self._hash.update(data)
            self.size += len(data)
            if self._on_bytes is not None:
                self._on_bytes(len(data))
            if self._expected_size is not None and self.size > self._expected_size:
                raise DigestMismatch(
                    f"{self._what} is larger than the {self._expected_size} bytes its"
                    f" descriptor states"
                )
            return data
        self.finished = True
        self.check()
        return b""

    def check(self) -> None:
        """Raise unless everything read so far is exactly the expected blob."""
        digest = f"sha256:{self._hash.hexdigest()}"
        if digest != self._expected_digest:
            raise DigestMismatch(
                f"{self._what} has digest {digest}, expected {self._expected_digest}",
                hint="the blob was corrupted in storage or transit, or the registry serves"
                " different content; pull again or check the registry",
            )
        if self._expected_size is not None and self.size != self._expected_size:
            raise DigestMismatch(
                f"{self._what} is {self.size} bytes, its descriptor states {self._expected_size}"
            )

    def drain(self) -> None:
        """Read to the end and check the digest: used before reporting a parse error.

        The check is made even when the end was reached before, by a thread whose error nobody
        took from its queue once a later stage had failed.
        """
        while self.read(CHUNK_SIZE):
            pass
        self.check()


class GunzipReader:
    """Decompress a gzip stream (several members allowed) in bounded chunks."""

    def __init__(self, source: Readable, what: str) -> None:
        self._source = source
        self._what = what
        self._inflater = zlib_ng.decompressobj(_GZIP_WBITS)
        self._input = b""
        self._output = b""
        self._offset = 0
        self._source_done = False

    def read(self, size: int = -1, /) -> bytes:
        if size is None or size < 0:
            size = CHUNK_SIZE
        while self._offset >= len(self._output):
            if not self._refill():
                return b""
        start = self._offset
        self._offset = min(start + size, len(self._output))
        return self._output[start : self._offset]

    def _refill(self) -> bool:
        """Decompress the next chunk into the output buffer; False at the end of the stream."""
        inflater = self._inflater
        while True:
            if inflater.eof:
                rest = inflater.unused_data + self._input
                self._input = b""
                if not rest and not self._source_done:
                    rest = self._source.read(CHUNK_SIZE)
                    self._source_done = not rest
                if not rest:
                    return False
                if not rest.startswith(_GZIP_MAGIC[: len(rest)]):
                    raise ImageError(f"{self._what} has trailing data after its gzip stream")
                inflater = self._inflater = zlib_ng.decompressobj(_GZIP_WBITS)
                self._input = rest
            data = inflater.unconsumed_tail or self._input
            self._input = b""
            if not data:
                data = self._source.read(CHUNK_SIZE)
                if not data:
                    raise ImageError(f"{self._what} ends in the middle of its gzip stream")
            try:
                output = inflater.decompress(data, CHUNK_SIZE)
            except _INFLATE_ERRORS as error:
                raise ImageError(f"{self._what} is not valid gzip: {error}") from None
            if output:
                self._output = output
                self._offset = 0
                return True


class Prefetching:
    """Read `source` in a thread of its own, a few chunks ahead of the reader.

    Inflating and hashing release the GIL for the length of a chunk, so the stages of a layer
    read that run in these (reading and hashing the blob; gunzip) take the second core while the
    caller's thread hashes the tar and walks its headers. At most `depth` chunks wait in
    between, so memory stays flat. An error in the thread is raised by the `read` that would
    have returned the data. `close()` stops the thread and must be called (it is idempotent)
    before anyone else reads `source`'s upstream; a `read` after it raises instead of waiting
    for data that will not come (so a stage reading from a closed one stops too).
    """

    def __init__(self, source: Readable, depth: int = 4, name: str = "layer-prefetch") -> None:
        self._source = source
        # Two of the C-implemented SimpleQueues instead of one bounded queue.Queue (Python code,
        # a Condition per wait): the chunks, and one token per free place, which the reader
        # gives back for each chunk it takes.
        self._chunks: queue.SimpleQueue[bytes | BaseException] = queue.SimpleQueue()
        self._room: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(depth):
            self._room.put(None)
        self._stop = threading.Event()
        self._pending = b""
        self._done = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                data = self._source.read(CHUNK_SIZE)
                self._put(data)
                if not data:
                    return
        except BaseException as error:  # handed to the reader, which raises it
            self._put(error)

    def _put(self, item: bytes | BaseException) -> None:
        while not self._stop.is_set():
            try:
                self._room.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
            self._chunks.put(item)
            return

    def _get(self) -> bytes | BaseException:
        while True:
            try:
                item = self._chunks.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if self._stop.is_set():
                    return ImageError("a layer stream was read after it was closed")
                continue
            self._room.put(None)
            return item

    def read(self, size: int = -1, /) -> bytes:
        if not self._pending:
            if self._done:
                return b""
            item = self._get()
            if isinstance(item, BaseException):
                self._done = True
                raise item
            if not item:
                self._done = True
                return b""
            self._pending = item
        if size is None or size < 0 or size >= len(self._pending):
            data, self._pending = self._pending, b""
            return data
        data, self._pending = self._pending[:size], self._pending[size:]
        return data

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class ForwardFile:
    """A stream as a file that seeks forward only: tarfile's random-access mode over a pipe.

    In stream mode tarfile skips a member's data in `bufsize` reads, each copied through its
    own buffer; with `seek` and `tell` it asks for the next header directly, and skipping here
    only moves through the chunks the source hands out (every byte is still read from it, so a
    digesting source still hashes all of them). A backward seek, which tarfile's sequential
    reading never makes, is refused rather than served wrongly.

    tarfile makes five of these calls per entry (tell, seek, read(1), read(512), tell), so the
    common case, all within the current chunk, is served before anything else.
    """

    def __init__(self, source: Readable, what: str) -> None:
        self._source = source
        self._what = what
        self._chunk = b""
        self._offset = 0  # into _chunk
        self._start = 0  # position of _chunk[0] in the stream
        self._ended = False

    def tell(self) -> int:
        return self._start + self._offset

    def seek(self, position: int, whence: int = 0, /) -> int:
        offset = position - self._start
        if whence == 0 and self._offset <= offset <= len(self._chunk):
            self._offset = offset
            return position
        if whence != 0 or offset < self._offset:
            raise ImageError(f"{self._what}: the tar reader seeks backward, which a stream cannot")
        while position - self._start > len(self._chunk):
            if not self._refill():
                # Past the end: the next read returns nothing, as for a file.
                self._offset = len(self._chunk)
                return self.tell()
        self._offset = position - self._start
        return position

    def read(self, size: int = -1, /) -> bytes:
        """`size` bytes, fewer only at the end (file semantics; tarfile relies on them)."""
        offset = self._offset
        end = offset + size
        if size >= 0 and end <= len(self._chunk):
            self._offset = end
            return self._chunk[offset:end]
        parts = [self._chunk[offset:]]
        self._offset = len(self._chunk)
        wanted = size - len(parts[0]) if size >= 0 else -1
        while wanted and self._refill():
            taken = len(self._chunk) if wanted < 0 else min(wanted, len(self._chunk))
            parts.append(self._chunk[:taken])
            self._offset = taken
            if wanted > 0:
                wanted -= taken
        return b"".join(parts)

    def _refill(self) -> bool:
        """The next chunk; False at the end of the stream."""
        if self._ended:
            return False
        self._start += len(self._chunk)
        self._chunk = self._source.read(CHUNK_SIZE)
        self._offset = 0
        self._ended = not self._chunk
        return not self._ended
