"""A real registry on loopback: Debian's `docker-registry` (distribution 2.8) with storage in tmp.

`registry` is shared by the session (anonymous, plain HTTP); `htpasswd_registry` requires Basic
auth with a bcrypt htpasswd made by the standard library's `crypt` (libxcrypt does bcrypt).
"""

from __future__ import annotations

import http.client
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contrast.local.processes import free_port  # not from the ephemeral range

REGISTRY_BINARY = "/usr/bin/docker-registry"


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:PORT
    storage: Path
    log: Path

    def blob_path(self, digest: str) -> Path:
        hexdigest = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"

    def requests(self, fragment: str) -> int:
        """How many requests the access log shows whose line contains `fragment`."""
        return sum(
            1
            for line in self.log.read_text(errors="replace").splitlines()
            if "HTTP/1.1" in line and fragment in line
        )


def start_registry(directory: Path, auth: str = "") -> tuple[subprocess.Popen[bytes], Registry]:
    if not Path(REGISTRY_BINARY).exists():
        pytest.fail(f"{REGISTRY_BINARY} is missing: install Debian's docker-registry package")
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    storage = directory / "storage"
    config = directory / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n  accesslog:\n    disabled: false\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n" + auth
    )
    log = directory / "registry.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [REGISTRY_BINARY, "serve", str(config)], stdout=output, stderr=subprocess.STDOUT
        )
    registry = Registry(f"127.0.0.1:{port}", storage, log)
    for _ in range(200):
        if process.poll() is not None:
            pytest.fail(f"docker-registry exited: {log.read_text()}")
        try:
            connection = http.client.HTTPConnection(registry.host, timeout=2)
            connection.request("GET", "/v2/")
            status = connection.getresponse().status
            connection.close()
            if status in {200, 401}:
                return process, registry
        except OSError:
            pass
        time.sleep(0.05)
    process.kill()
    pytest.fail("docker-registry did not answer on /v2/")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    directory = tmp_path_factory.mktemp("registry")
    process, running = start_registry(directory)
    yield running
    stop(process)
    shutil.rmtree(directory, ignore_errors=True)


USER, PASSWORD = "alice", "s3cret-pa55"


@pytest.fixture(scope="module")
def htpasswd_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

    # Cost 4: bcrypt is checked on every request, and the tests only need the format.
    hashed = crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
    if not hashed or not hashed.startswith("$2"):
        pytest.skip("this libc's crypt() cannot make bcrypt hashes")
    directory = tmp_path_factory.mktemp("registry-auth")
    htpasswd = directory / "htpasswd"
    htpasswd.write_text(f"{USER}:{hashed}\n")
    auth = f"auth:\n  htpasswd:\n    realm: test-registry\n    path: {htpasswd}\n"
    process, running = start_registry(directory, auth)
    yield running
    stop(process)
