"""Registry authentication: Basic from a Docker config against a real htpasswd registry, and the
Bearer token flow against a small loopback registry written here (Debian's registry can do token
auth only with a JWT-issuing token server, which would be more test code than the client's flow).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from contrast.images.auth import Challenge, DockerConfig, registry_host
from contrast.images.model import ImageError
from contrast.images.registry import RegistryError
from contrast.images.resolver import ImageResolver
from tests.images import imagebuild as build
from tests.images.conftest import PASSWORD, USER, Registry
from tests.images.pusher import Pusher


def docker_config(path: Path, host: str, user: str, password: str) -> Path:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"auths": {f"http://{host}": {"auth": auth}}}))
    return path


def test_basic_auth_from_docker_config(htpasswd_registry: Registry, tmp_path: Path) -> None:
    host = htpasswd_registry.host
    image = build.image([build.layer([build.file("etc/passwd", "a:x:1:1::/:/bin/sh\n")])])
    Pusher(host, auth=(USER, PASSWORD)).image("private/app", "v1", image)
    reference = f"{host}/private/app:v1"
    config = docker_config(tmp_path / "docker", host, USER, PASSWORD)

    facts = ImageResolver(insecure_registries=[host], docker_config=config).resolve([reference])

    assert facts[reference].etc_passwd == "a:x:1:1::/:/bin/sh\n"


def test_wrong_or_missing_credentials(
    htpasswd_registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = htpasswd_registry.host
    reference = f"{host}/private/app:v1"
    wrong = docker_config(tmp_path / "wrong", host, USER, "not-the-password-xyz")
    with pytest.raises(RegistryError) as caught:
        ImageResolver(insecure_registries=[host], docker_config=wrong).resolve([reference])
    assert "denied" in str(caught.value)
    assert "credentials" in (caught.value.hint or "")
    assert "not-the-password-xyz" not in caught.value.explain()

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty"))
    with pytest.raises(RegistryError) as anonymous:
        ImageResolver(insecure_registries=[host]).resolve([reference])
    assert f"docker login {host}" in (anonymous.value.hint or "")


def test_docker_config_locations_and_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = docker_config(tmp_path / "env", "r.example:5000", "u", "p:with:colons")
    monkeypatch.setenv("DOCKER_CONFIG", str(directory))
    loaded = DockerConfig.load()
    credentials = loaded.credentials("r.example:5000")
    assert credentials is not None
    assert (credentials.username, credentials.password) == ("u", "p:with:colons")
    assert "p:with:colons" not in repr(loaded) + repr(credentials)

    hub = tmp_path / "hub.json"
    hub.write_text(
        json.dumps(
            {
                "auths": {
                    "https://index.docker.io/v1/": {"username": "h", "password": "q"},
                    "bad.example": {"auth": base64.b64encode(b"nocolon").decode()},
                }
            }
        )
    )
    with pytest.raises(ImageError, match=r"bad\.example"):
        DockerConfig.load(hub)
    hub.write_text(
        json.dumps({"auths": {"https://index.docker.io/v1/": {"username": "h", "password": "q"}}})
    )
    assert DockerConfig.load(hub).credentials("registry-1.docker.io") is not None
    with pytest.raises(ImageError, match="does not exist"):
        DockerConfig.load(tmp_path / "missing" / "config.json")
    assert registry_host("https://ghcr.io/v2/") == "ghcr.io"


def test_challenge_parsing() -> None:
    challenge = Challenge.parse(
        'Bearer realm="https://auth.example/token",service="reg,istry",scope="repository:a/b:pull"'
    )
    assert challenge is not None
    assert challenge.scheme == "bearer"
    assert challenge.parameters == {
        "realm": "https://auth.example/token",
        "service": "reg,istry",
        "scope": "repository:a/b:pull",
    }
    basic = Challenge.parse('Basic realm="x"')
    assert basic is not None
    assert basic.scheme == "basic"
    assert Challenge.parse("") is None


class _TokenRegistry:
    """A registry that wants a Bearer token, with a token service and a redirecting blob store."""

    token = "tok-123"

    def __init__(self, image: build.Image, repository: str) -> None:
        self.seen: list[tuple[str, str | None]] = []
        blobs = {blob.digest: blob.data for blob in image.blobs}
        outer = self

        class Storage(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.seen.append((f"storage {self.path}", self.headers.get("Authorization")))
                data = blobs.get(self.path.removeprefix("/"))
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.storage = ThreadingHTTPServer(("127.0.0.1", 0), Storage)
        storage_host = f"127.0.0.1:{self.storage.server_address[1]}"

        class Api(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                authorization = self.headers.get("Authorization")
                outer.seen.append((self.path, authorization))
                if self.path.startswith("/token?"):
                    expected = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
                    if authorization != f"Basic {expected}":
                        return self._send(401, b"{}")
                    return self._send(200, json.dumps({"token": outer.token}).encode())
                if authorization != f"Bearer {outer.token}":
                    realm = f"http://{self.headers['Host']}/token"
                    challenge = (
                        f'Bearer realm="{realm}",service="test",'
                        f'scope="repository:{repository}:pull"'
                    )
                    return self._send(401, b"{}", {"WWW-Authenticate": challenge})
                prefix = f"/v2/{repository}/"
                if self.path == f"{prefix}manifests/v1":
                    headers = {"Content-Type": image.manifest.media_type}
                    return self._send(200, image.manifest.data, headers)
                if self.path.startswith(f"{prefix}blobs/"):
                    digest = self.path.removeprefix(f"{prefix}blobs/")
                    location = f"http://{storage_host}/{digest}"
                    return self._send(307, b"", {"Location": location})
                return self._send(404, b"{}")

            def _send(
                self, status: int, body: bytes, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.api = ThreadingHTTPServer(("127.0.0.1", 0), Api)
        self.host = f"127.0.0.1:{self.api.server_address[1]}"

    def __enter__(self) -> _TokenRegistry:
        for server in (self.api, self.storage):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *args: object) -> None:
        for server in (self.api, self.storage):
            server.shutdown()
            server.server_close()


@pytest.fixture
def token_registry() -> Iterator[_TokenRegistry]:
    image = build.image([build.layer([build.file("etc/group", "t:x:4:\n")])], {"User": "t"})
    with _TokenRegistry(image, "team/app") as running:
        yield running


def test_bearer_token_flow_and_redirect_without_credentials(
    token_registry: _TokenRegistry, tmp_path: Path
) -> None:
    host = token_registry.host
    config = docker_config(tmp_path / "docker", host, USER, PASSWORD)
    reference = f"{host}/team/app:v1"

    facts = ImageResolver(insecure_registries=[host], docker_config=config).resolve([reference])

    assert facts[reference].config.user == "t"
    assert facts[reference].etc_group == "t:x:4:\n"
    token_requests = [path for path, _ in token_registry.seen if path.startswith("/token?")]
    assert token_requests
    assert "scope=repository%3Ateam%2Fapp%3Apull" in token_requests[0]
    assert "service=test" in token_requests[0]
    storage = [auth for path, auth in token_registry.seen if path.startswith("storage")]
    assert len(storage) == 2  # config and layer, both via the redirect
    assert storage == [None, None]  # the token stays with the registry's host


def test_bearer_token_refused(token_registry: _TokenRegistry, tmp_path: Path) -> None:
    host = token_registry.host
    config = docker_config(tmp_path / "docker", host, USER, "wrong-password-abc")
    with pytest.raises(RegistryError, match="token service") as caught:
        ImageResolver(insecure_registries=[host], docker_config=config).resolve(
            [f"{host}/team/app:v1"]
        )
    assert "wrong-password-abc" not in caught.value.explain()
