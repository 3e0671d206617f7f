"""Layer reading: throughput against hashlib's sha256 on the same bytes, and peak memory.

`read_layer` hashes the compressed blob, gunzips it, hashes the tar (diff_id) and walks its entries
for etc/passwd and etc/group. Two baselines are measured in the same run on the same file:
- sha256 of the compressed bytes alone (the goal: reading at >= 50 % of its speed);
- the floor any checked read must pay: sha256(compressed) + zlib inflate + sha256(tar).
Inflating is the bulk of the work: zlib alone reaches only about half of sha256's speed on such a
layer, which is the ceiling for any reader that must look inside; the script prints that too.
The layer mixes what real layers hold: binaries (random, barely compressible), text (compresses
about 4x) and many small files. Then peak traced memory for layers of 16 and 128 MiB uncompressed,
to show it does not grow with the layer.

Run: `.venv/bin/python bench/bench_images.py [layer MiB]` (default 64 MiB of compressed data).
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import sys
import tarfile
import tempfile
import tracemalloc
import zlib
from pathlib import Path

from contrast.images.layers import read_layer
from contrast.images.manifest import Descriptor
from timing import best_per_call  # bench/timing.py, beside this script

GOAL = 0.5
MIB = 1024 * 1024
CHUNK = 256 * 1024
WORDS = (
    b"root daemon bin sys sync games man lp mail news uucp proxy www-data backup list irc".split()
)


def text_block(rng: random.Random, size: int) -> bytes:
    words = [rng.choice(WORDS) for _ in range(size // 5)]
    return b" ".join(words)[:size]


def text_mib(rng: random.Random, pool: list[bytes]) -> bytes:
    """1 MiB of text from shuffled 64 KiB pieces: compresses like text, builds quickly."""
    return b"".join(rng.choice(pool) for _ in range(16))


def write_layer(
    path: Path, compressed_target: int, *, binary_share: float, seed: int, level: int = 6
) -> int:
    """A gzip tar with passwd/group, small files and 1 MiB files; returns its uncompressed size."""
    rng = random.Random(seed)
    pool = [text_block(rng, 64 * 1024) for _ in range(32)]
    raw = path.with_suffix(".tar")
    with tarfile.open(raw, "w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        add("etc/group", b"root:x:0:\n")
        for number in range(2000):
            add(f"usr/share/doc/file{number}", text_block(rng, rng.randrange(200, 4000)))
        estimate, number = 0, 0
        while estimate < compressed_target:
            if rng.random() < binary_share:
                data = rng.randbytes(MIB)
                estimate += MIB
            else:
                data = text_mib(rng, pool)
                estimate += MIB // 4
            add(f"usr/lib/blob{number}", data)
            number += 1
    size = raw.stat().st_size
    compressor = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with raw.open("rb") as source, path.open("wb") as target:
        while chunk := source.read(4 * MIB):
            target.write(compressor.compress(chunk))
        target.write(compressor.flush())
    raw.unlink()
    return size


def digests(path: Path) -> tuple[str, str]:
    compressed, uncompressed = hashlib.sha256(), hashlib.sha256()
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            compressed.update(chunk)
            uncompressed.update(inflater.decompress(chunk))
    return f"sha256:{compressed.hexdigest()}", f"sha256:{uncompressed.hexdigest()}"


def read(path: Path, digest: str, diff_id: str) -> None:
    descriptor = Descriptor(
        "application/vnd.oci.image.layer.v1.tar+gzip", digest, path.stat().st_size
    )
    with path.open("rb") as source:
        facts = read_layer(source, descriptor, diff_id, "bench layer")
    assert facts.passwd.content is not None


def sha256_only(path: Path) -> None:
    with path.open("rb") as source:
        hasher = hashlib.sha256()
        while chunk := source.read(CHUNK):
            hasher.update(chunk)


def inflate_only(path: Path) -> None:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            inflater.decompress(chunk)


def floor(path: Path) -> None:
    digests(path)


def peak_memory(path: Path) -> int:
    digest, diff_id = digests(path)
    tracemalloc.start()
    read(path, digest, diff_id)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    target = int(arguments[0]) * MIB if arguments else 64 * MIB
    with tempfile.TemporaryDirectory() as directory:
        layer = Path(directory) / "layer.tar.gz"
        uncompressed = write_layer(layer, target, binary_share=0.5, seed=1)
        compressed = layer.stat().st_size
        digest, diff_id = digests(layer)
        sha_time = best_per_call(lambda: sha256_only(layer), 1, rounds=3)
        inflate_time = best_per_call(lambda: inflate_only(layer), 1, rounds=3)
        floor_time = best_per_call(lambda: floor(layer), 1, rounds=3)
        read_time = best_per_call(lambda: read(layer, digest, diff_id), 1, rounds=3)
        print(f"layer: {compressed / MIB:.1f} MiB gzip, {uncompressed / MIB:.1f} MiB tar")
        print(f"sha256(compressed)              {compressed / MIB / sha_time:8.1f} MiB/s")
        print(f"zlib inflate alone              {compressed / MIB / inflate_time:8.1f} MiB/s")
        print(f"floor (sha256+inflate+sha256)   {compressed / MIB / floor_time:8.1f} MiB/s")
        print(f"read_layer                      {compressed / MIB / read_time:8.1f} MiB/s")
        print(f"ratio read_layer / sha256       {sha_time / read_time:8.2f}  (goal >= {GOAL})")
        print(f"ratio read_layer / floor        {floor_time / read_time:8.2f}")
        print(f"ratio inflate alone / sha256    {sha_time / inflate_time:8.2f}  (the ceiling)")
        os.remove(layer)
        for size in (16, 128):
            path = Path(directory) / f"mem{size}.tar.gz"
            # Mostly text: small on disk, quick to build, still `size` MiB to walk and hash.
            actual = write_layer(path, size * MIB // 4, binary_share=0.0, seed=size, level=1)
            peak = peak_memory(path)
            print(f"peak traced memory, {actual / MIB:6.1f} MiB tar   {peak / MIB:8.2f} MiB")
            os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
