"""The release images: build time, each image's size, and the Coordinator container's start.

Builds the four images (wheels from the shared cache, Debian packages from the mirror), prints
the build time and each image's compressed and uncompressed size; then runs the Coordinator
image under a private containerd (emulated SNP) and measures container start to a first answer
of its readiness probe, against the same Coordinator started as a local process. Needs root,
mmdebstrap, containerd, runc, skopeo and docker-registry.

Run: `sudo .venv/bin/python bench/bench_release_images.py`.
"""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from contrast.imagebuild.build import build
from contrast.imagebuild.cli import DEFAULT_EPOCH
from contrast.imagebuild.lock import Lock
from contrast.local.processes import free_port
from contrast.local.runners import ContainerRunner

REPOSITORY = Path(__file__).resolve().parents[1]
ROUNDS = 3


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/probe/readiness", timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # 503 with the mode: up, waiting for a manifest
    except OSError:
        return False


def _until_answering(port: int) -> float:
    started = time.perf_counter()
    while not _answers(port):
        if time.perf_counter() - started > 60:
            raise SystemExit("the Coordinator did not answer within 60 s")
        time.sleep(0.01)
    return time.perf_counter() - started


def _arguments(state: Path, port: int) -> list[str]:
    return [
        "coordinator", "--tee", "emulated-snp", "--tee-state", str(state / "tee"),
        "--policy-hash", "00" * 32, "--state-dir", str(state / f"coordinator-{port}"),
        "--listen", "127.0.0.1", "--user-api-port", str(free_port()),
        "--mesh-api-port", str(free_port()), "--http-port", str(port), "--transit-port", "0",
    ]  # fmt: skip


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-images-"))
    layout = scratch / "layout"
    started = time.perf_counter()
    release = build(
        REPOSITORY,
        layout,
        lock=Lock.from_file(REPOSITORY / "images/lock.json"),
        cache=Path.home() / ".cache/contrast/wheels",
        epoch=DEFAULT_EPOCH,
    )
    print(f"build: {time.perf_counter() - started:.0f} s (warm wheel cache)")
    for image in release.images:
        manifest = json.loads((layout / "blobs/sha256" / image.digest[7:]).read_bytes())
        plain = sum(
            len(gzip.decompress((layout / "blobs/sha256" / layer["digest"][7:]).read_bytes()))
            for layer in manifest["layers"]
        )
        print(f"{image.name:20} {image.size / 1e6:6.1f} MB compressed, {plain / 1e6:6.1f} MB")

    state = scratch / "state"
    (state / "tee").mkdir(parents=True)
    local = []
    for _ in range(ROUNDS):
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "contrast", *_arguments(state, port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        local.append(_until_answering(port))
        process.kill()
        process.wait()
    runner = ContainerRunner(layout, scratch)
    contained = []
    try:
        runner.prepare(("coordinator",))
        for round_number in range(ROUNDS):
            port = free_port()
            started = time.perf_counter()
            container = runner.start(
                f"coordinator-{round_number}", "coordinator", _arguments(state, port)
            )
            _until_answering(port)
            contained.append(time.perf_counter() - started)
            container.kill()
    finally:
        runner.stop_all()
    baseline = statistics.median(local)
    measured = statistics.median(contained)
    print(f"Coordinator start to first probe answer, median of {ROUNDS}:")
    print(f"  local process (baseline): {baseline:.2f} s")
    print(f"  container (ctr run):      {measured:.2f} s  = {measured / baseline:.2f} × baseline")


if __name__ == "__main__":
    main()
