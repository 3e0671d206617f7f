"""Vault's `seal "transit"` as a program (tools/transitseal), built once into a shared cache.

The binary is cached as scripts/cluster.sh caches the cluster's: under
`~/.cache/contrast/transitseal/<sha256 of go.mod, go.sum, main.go>`, built under a lock so that
two sessions build it once, and rebuilt when the pin or the program changes. A cold build (the
modules downloaded from the Go proxy and compiled) took 1.5 to 4 minutes here on the shared
2-core machine; a warm one is a hash and a file check.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

MODULE = REPO / "tools" / "transitseal"
SOURCES = ("go.mod", "go.sum", "main.go")


def cache_dir() -> Path:
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (MODULE / name).read_bytes() + b"\0")
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "contrast" / "transitseal" / digest.hexdigest()


def seal_binary() -> Path:
    """The built program; the test fails (not skips) without Go, saying so."""
    cache = cache_dir()
    binary = cache / "transitseal"
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        pytest.fail(
            "go is missing: Vault's transit seal (tools/transitseal) is built from source with"
            " Go 1.24 or later"
        )
    cache.mkdir(parents=True, exist_ok=True)
    with (cache.parent / f"{cache.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building the same cache
        if binary.is_file():
            return binary
        partial = cache / "transitseal.partial"
        environment = {**os.environ, "GOFLAGS": "-buildvcs=false -mod=readonly"}
        result = subprocess.run(
            [go, "build", "-trimpath", "-o", str(partial), "."],
            cwd=MODULE, env=environment, capture_output=True, text=True, timeout=1800,
            check=False,
        )  # fmt: skip
        if result.returncode != 0:
            pytest.fail(f"building tools/transitseal failed:\n{result.stderr[-4000:]}")
        partial.rename(binary)
    return binary


def run_seal(
    config: dict[str, str], *, plaintext: bytes | None = None, ciphertext: str | None = None
) -> dict[str, Any]:
    """One start of the seal with this stanza: SetConfig, then encrypt and/or decrypt."""
    request: dict[str, Any] = {"config": config}
    if plaintext is not None:
        request["plaintext"] = base64.b64encode(plaintext).decode()
    if ciphertext is not None:
        request["ciphertext"] = ciphertext
    result = subprocess.run(
        [str(seal_binary())], input=json.dumps(request), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    answer: dict[str, Any] = json.loads(result.stdout)
    assert (result.returncode == 0) == ("error" not in answer), (result.returncode, answer)
    return answer
