"""Layer writing: `write_layer` of one big file against raw gzip of the same bytes, and memory.

The payload image's layer is mostly one big file (the guest image), so the file here is one of
N MiB, half random (incompressible, as binaries and firmware) and half zeros (as an image's free
space). Measured in the same run on the same file, the loops taking turns:
- floor: the file read in 1 MiB chunks and gzipped at the layer's level (zlib, 6) into a file,
  nothing else: what any gzip layer of these bytes costs;
- floor + hashes: the same with sha256 of the input and of the output, the two digests a layer
  needs (diff_id, digest);
- write_layer: the tar of the file, gzipped and hashed, streamed into a file (`Entry.from_file`);
- LayoutWriter.layer: the same into a layout's blobs, synced and renamed under its digest.
Then the peak traced memory of `LayoutWriter.layer`, which must not grow with the file. On a
shared host the CPU ratio is the steadier one: wall time waits for the other processes and the disk.

Run: `.venv/bin/python bench/bench_layer_write.py [MiB]` (default 256).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

from contrast.imagebuild.layer import CHUNK, GZIP_LEVEL, Entry, write_layer
from contrast.imagebuild.oci import LayoutWriter
from timing import best_interleaved  # bench/timing.py, beside this script

MIB = 1 << 20


def payload(path: Path, size: int) -> None:
    with path.open("wb") as file:
        for _ in range(size // 2 // MIB):
            file.write(os.urandom(MIB))
        file.write(bytes(size - size // 2 // MIB * MIB))


def floor(source: Path, target: Path, *, hashes: bool) -> None:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    plain, compressed = hashlib.sha256(), hashlib.sha256()
    with source.open("rb") as file, target.open("wb") as out:
        while chunk := file.read(CHUNK):
            data = compressor.compress(chunk)
            if hashes:
                plain.update(chunk)
                compressed.update(data)
            out.write(data)
        out.write(compressor.flush())


def layer(source: Path, target: Path) -> None:
    with target.open("wb", buffering=CHUNK) as out:
        write_layer([Entry.from_file("opt/guest.img", source)], 1700000000, out)


def timed_cpu(function: Callable[[], object], times: dict[str, float], name: str) -> None:
    cpu = time.process_time()
    function()
    times[name] = min(times.get(name, float("inf")), time.process_time() - cpu)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    size = int(arguments[0]) * MIB if arguments else 256 * MIB
    with tempfile.TemporaryDirectory(dir=Path.home()) as directory:
        scratch = Path(directory)
        source = scratch / "guest.img"
        payload(source, size)
        out = scratch / "out"
        writer = LayoutWriter(scratch / "layout")
        cpu: dict[str, float] = {}

        def into_layout() -> None:
            for blob in writer.blobs.iterdir():
                blob.unlink()
            writer.layer([Entry.from_file("opt/guest.img", source)], 1700000000)

        best = best_interleaved(
            {
                "floor": lambda: timed_cpu(lambda: floor(source, out, hashes=False), cpu, "floor"),
                "hashes": lambda: timed_cpu(lambda: floor(source, out, hashes=True), cpu, "hashes"),
                "layer": lambda: timed_cpu(lambda: layer(source, out), cpu, "layer"),
                "layout": lambda: timed_cpu(into_layout, cpu, "layout"),
            },
            1,
            rounds=3,
        )
        compressed = out.stat().st_size
        print(
            f"one file of {size / MIB:.0f} MiB (half random, half zeros),"
            f" {compressed / MIB:.1f} MiB gzip"
        )
        for name, label in (
            ("floor", "floor: gzip -6 of the bytes"),
            ("hashes", "floor + sha256 of both"),
            ("layer", "write_layer into a file"),
            ("layout", "LayoutWriter.layer (fsync)"),
        ):
            print(
                f"{label:30} wall {best[name]:6.2f} s  CPU {cpu[name]:6.2f} s"
                f"  {size / MIB / best[name]:7.1f} MiB/s"
                f"  ratio to floor: wall {best['floor'] / best[name]:.2f}"
                f" CPU {cpu['floor'] / cpu[name]:.2f}"
            )
        for blob in writer.blobs.iterdir():
            blob.unlink()
        tracemalloc.start()
        writer.layer([Entry.from_file("opt/guest.img", source)], 1700000000)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"peak traced memory of LayoutWriter.layer  {peak / MIB:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
