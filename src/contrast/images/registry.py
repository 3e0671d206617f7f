"""A client for the OCI distribution API v2: manifests and blobs, with Docker-style auth.

Standard library HTTP only (`http.client`): one connection per request, which keeps the client
thread-safe without a pool. Authentication follows the distribution spec's token flow: a request is
first sent as it is; a 401 carries a `WWW-Authenticate` challenge, answered with Basic credentials
from the Docker config or a Bearer token from the challenge's realm (asked with those credentials
if there are any). Answers are remembered per registry and repository. Redirects (blob storage
behind a CDN) are followed, without credentials when they leave the registry's host.

Hosts named in `insecure_registries` are spoken to over plain HTTP, all others over HTTPS.
Connection failures, 429 and 5xx are retried a bounded number of times; other errors become
`RegistryError`s that say what to do.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

from contrast.images.auth import Challenge, DockerConfig
from contrast.images.manifest import ACCEPTED_MANIFEST_TYPES, MAX_DOCUMENT_SIZE
from contrast.images.model import ImageError
from contrast.images.reference import ImageReference

LOG = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
DEFAULT_ATTEMPTS = 3
MAX_REDIRECTS = 5
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class RegistryError(ImageError):
    """A registry that refuses, lacks or garbles what was asked for."""


@dataclass(frozen=True)
class ManifestDocument:
    """A manifest as served: its bytes, media type and the digest the registry claims."""

    data: bytes
    media_type: str
    claimed_digest: str | None


class RegistryClient:
    """Fetch manifests and blobs of images from their registries."""

    def __init__(
        self,
        *,
        insecure_registries: Collection[str] = (),
        docker_config: DockerConfig | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff: float = 0.5,
        tls_context: ssl.SSLContext | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._insecure = frozenset(insecure_registries)
        self._config = docker_config if docker_config is not None else DockerConfig(path=None)
        self._timeout = timeout
        self._attempts = max(1, attempts)
        self._backoff = backoff
        self._tls = tls_context or ssl.create_default_context()
        self._sleep = sleep
        self._authorizations: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def manifest(self, reference: ImageReference, tag_or_digest: str) -> ManifestDocument:
        """GET a manifest or index by tag or digest (not yet verified: the caller does that)."""
        response = self._get(
            reference,
            f"manifests/{tag_or_digest}",
            accept=", ".join(ACCEPTED_MANIFEST_TYPES),
            what=f"manifest {tag_or_digest} of {reference.name}",
        )
        with response:
            data = response.read(MAX_DOCUMENT_SIZE + 1)
        if len(data) > MAX_DOCUMENT_SIZE:
            raise RegistryError(f"the manifest of {reference} is larger than {MAX_DOCUMENT_SIZE}")
        media_type = (response.getheader("Content-Type") or "").split(";")[0].strip()
        return ManifestDocument(data, media_type, response.getheader("Docker-Content-Digest"))

    def open_blob(self, reference: ImageReference, digest: str) -> http.client.HTTPResponse:
        """A streaming response for a blob of `reference`'s repository; the caller closes it."""
        return self._get(reference, f"blobs/{digest}", accept="*/*", what=f"blob {digest}")

    def _get(
        self, reference: ImageReference, path: str, *, accept: str, what: str
    ) -> http.client.HTTPResponse:
        host = reference.api_host
        insecure = host in self._insecure or reference.registry in self._insecure
        scheme = "http" if insecure else "https"
        url = f"{scheme}://{host}/v2/{reference.repository}/{path}"
        key = (host, reference.repository)
        for round_ in range(2):
            with self._lock:
                authorization = self._authorizations.get(key)
            headers = {"Accept": accept}
            if authorization:
                headers["Authorization"] = authorization
            response = self._send(url, headers)
            if response.status == 401 and round_ == 0:
                header = response.getheader("WWW-Authenticate") or ""
                _discard(response)
                answer = self._answer(reference, Challenge.parse(header), authorization)
                with self._lock:
                    self._authorizations[key] = answer
                continue
            if response.status == 200:
                return response
            raise self._failure(response, reference, what)
        raise AssertionError("unreachable")  # pragma: no cover

    def _answer(
        self, reference: ImageReference, challenge: Challenge | None, tried: str | None
    ) -> str:
        """The Authorization header value that answers a 401's challenge."""
        credentials = self._config.credentials(reference.registry)
        if challenge is None or challenge.scheme not in {"basic", "bearer"}:
            raise self._denied(reference, 401, "with an authentication scheme not supported")
        if challenge.scheme == "basic":
            if credentials is None or tried is not None:
                raise self._denied(reference, 401, "")
            return credentials.basic_header()
        realm = challenge.parameters.get("realm", "")
        if urlsplit(realm).scheme not in {"http", "https"}:
            raise RegistryError(f"the registry of {reference} sent a token realm {realm!r}")
        query = {"scope": f"repository:{reference.repository}:pull"}
        if "service" in challenge.parameters:
            query["service"] = challenge.parameters["service"]
        if "scope" in challenge.parameters:
            query["scope"] = challenge.parameters["scope"]
        headers = {"Accept": "application/json"}
        if credentials is not None:
            headers["Authorization"] = credentials.basic_header()
        separator = "&" if "?" in realm else "?"
        response = self._send(f"{realm}{separator}{urlencode(query)}", headers)
        with response:
            body = response.read(MAX_DOCUMENT_SIZE)
        if response.status in {401, 403}:
            raise self._denied(reference, response.status, "by its token service")
        if response.status != 200:
            raise RegistryError(
                f"the token service of {reference.registry} answered HTTP {response.status}"
            )
        try:
            document = json.loads(body)
            token = document.get("token") or document.get("access_token")
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"the token service of {reference.registry} sent no token")
        return f"Bearer {token}"

    def _denied(self, reference: ImageReference, status: int, how: str) -> RegistryError:
        has_credentials = self._config.credentials(reference.registry) is not None
        where = f" in {self._config.path}" if self._config.path else ""
        return RegistryError(
            f"access to {reference.name} was denied (HTTP {status}){' ' + how if how else ''}",
            hint=(
                f"the credentials for {reference.registry}{where} were refused; check them"
                " or run docker login again"
                if has_credentials
                else f"run docker login {reference.registry}, or check the image name"
            ),
        )

    def _failure(
        self, response: http.client.HTTPResponse, reference: ImageReference, what: str
    ) -> RegistryError:
        status = response.status
        detail = _error_detail(response)
        if status in {401, 403}:
            return self._denied(reference, status, detail)
        if status == 404:
            return RegistryError(
                f"{what} was not found in {reference.registry} ({reference} does not exist)",
                hint="check the image name and tag, and that it was pushed to this registry",
            )
        return RegistryError(f"{what} of {reference}: the registry answered HTTP {status} {detail}")

    def _send(self, url: str, headers: Mapping[str, str]) -> http.client.HTTPResponse:
        """GET `url`, following redirects and retrying transient failures."""
        origin = urlsplit(url).netloc
        for _ in range(MAX_REDIRECTS + 1):
            response = self._send_once(url, headers)
            if response.status not in _REDIRECT_STATUSES:
                return response
            location = response.getheader("Location") or ""
            _discard(response)
            url = urljoin(url, location)
            if urlsplit(url).netloc != origin:
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        raise RegistryError(f"too many redirects fetching {urlsplit(url).netloc}")

    def _send_once(self, url: str, headers: Mapping[str, str]) -> http.client.HTTPResponse:
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        last_error = ""
        for attempt in range(self._attempts):
            if attempt:
                self._sleep(self._backoff * 2 ** (attempt - 1))
            connection: http.client.HTTPConnection
            if parts.scheme == "https":
                connection = http.client.HTTPSConnection(
                    parts.netloc, timeout=self._timeout, context=self._tls
                )
            else:
                connection = http.client.HTTPConnection(parts.netloc, timeout=self._timeout)
            try:
                connection.request("GET", target, headers=dict(headers))
                response = connection.getresponse()
            except ssl.SSLError as error:
                connection.close()
                raise RegistryError(
                    f"TLS with {parts.netloc} failed: {error.reason or error}",
                    hint="if this registry speaks plain HTTP, list it as an insecure registry",
                ) from None
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                last_error = str(error) or type(error).__name__
                LOG.debug("GET %s failed (%s), attempt %d", parts.netloc, last_error, attempt + 1)
                continue
            if response.status in _RETRY_STATUSES and attempt + 1 < self._attempts:
                last_error = f"HTTP {response.status}"
                _discard(response)
                connection.close()
                continue
            return response
        raise RegistryError(
            f"cannot reach {parts.scheme}://{parts.netloc} ({last_error}) after"
            f" {self._attempts} attempts",
            hint="check the registry host, the network, and whether it needs --insecure-registry",
        )


def _discard(response: http.client.HTTPResponse) -> None:
    with contextlib.suppress(OSError, http.client.HTTPException):
        response.read(MAX_DOCUMENT_SIZE)
    response.close()


def _error_detail(response: http.client.HTTPResponse) -> str:
    """The `errors` of a registry's error body (codes and messages, no secrets), or ''."""
    try:
        body = response.read(64 * 1024)
    except (OSError, http.client.HTTPException):
        return ""
    finally:
        response.close()
    try:
        document: Any = json.loads(body)
        errors = document.get("errors") or []
        return "; ".join(f"{e.get('code', '')}: {e.get('message', '')}" for e in errors)[:300]
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError):
        return ""
