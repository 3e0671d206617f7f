"""Registry credentials from the Docker config, and the `WWW-Authenticate` challenges they answer.

Only `auths` entries with user and password are read (base64 `auth` or `username`/`password`),
the part of `docker login` that works without helper programs; genpolicy supports the same
(research/policy.md §4.1). Credential helpers and identity tokens are not run: if an entry uses
them, a warning says so and the registry is tried anonymously. Passwords never appear in messages.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from contrast.boundedfile import read_bounded
from contrast.images.model import ImageError
from contrast.images.reference import DOCKER_HUB, DOCKER_HUB_API

LOG = logging.getLogger(__name__)
# A Docker config is read whole (`contrast.boundedfile`): a few KiB with a handful of registries.
CONFIG_MAX_BYTES = 16 << 20

_DOCKER_HUB_KEYS = frozenset(
    {DOCKER_HUB, DOCKER_HUB_API, "index.docker.io", "https://index.docker.io/v1/"}
)
_CHALLENGE_PARAMETER = re.compile(
    r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))'
)


@dataclass(frozen=True)
class Credentials:
    """A user and password for one registry (`repr` hides the password)."""

    username: str
    password: str = field(repr=False)

    def basic_header(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return f"Basic {token}"


@dataclass(frozen=True)
class DockerConfig:
    """The `auths` of a Docker config file, by registry host."""

    path: Path | None
    auths: Mapping[str, Credentials] = field(default_factory=dict, repr=False)
    helpers: frozenset[str] = frozenset()

    @classmethod
    def load(cls, path: Path | None = None) -> DockerConfig:
        """Read `path` (a config.json or a directory holding one), else the default location.

        The default is `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`; a missing
        default file means anonymous access, a missing explicit one is an error.
        """
        explicit = path is not None
        if path is None:
            directory = os.environ.get("DOCKER_CONFIG")
            path = Path(directory) if directory else Path.home() / ".docker"
        if path.is_dir() or not path.name.endswith(".json"):
            path = path / "config.json"
        try:
            text = read_bounded(
                path,
                CONFIG_MAX_BYTES,
                what="the Docker config",
                hint="point the docker config option at config.json",
            )
        except FileNotFoundError:
            if explicit:
                raise ImageError(
                    f"Docker config {path} does not exist",
                    hint="run docker login, or point the docker config option at config.json",
                ) from None
            return cls(path=None)
        except OSError as error:
            raise ImageError(f"Docker config {path} cannot be read: {error.strerror}") from None
        try:
            document = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ImageError(f"Docker config {path} is not valid JSON") from None
        if not isinstance(document, dict):
            raise ImageError(f"Docker config {path} is not a JSON object")
        return cls.from_json(document, path)

    @classmethod
    def from_json(cls, document: Mapping[str, Any], path: Path | None) -> DockerConfig:
        auths: dict[str, Credentials] = {}
        helpers: set[str] = set()
        for key, entry in (document.get("auths") or {}).items():
            host = registry_host(str(key))
            if not isinstance(entry, Mapping):
                continue
            credentials = _credentials(entry, host, path)
            if credentials is not None:
                auths[host] = credentials
            elif entry.get("identitytoken"):
                helpers.add(host)
        for key in document.get("credHelpers") or {}:
            helpers.add(registry_host(str(key)))
        if document.get("credsStore"):
            helpers.add("*")
        return cls(path=path, auths=auths, helpers=frozenset(helpers))

    def credentials(self, host: str) -> Credentials | None:
        """The credentials for `host` (a reference's registry or its API host)."""
        key = registry_host(host)
        found = self.auths.get(key)
        if found is None and (key in self.helpers or "*" in self.helpers):
            LOG.warning(
                "the Docker config names a credential helper or identity token for %s, which"
                " are not supported; trying without credentials",
                key,
            )
        return found


def registry_host(key: str) -> str:
    """The host of an `auths` key (`https://host/v1/`, `host:port`, …); Docker Hub as docker.io."""
    text = key if "://" in key else f"//{key}"
    host = urlsplit(text).netloc or key
    return DOCKER_HUB if host in _DOCKER_HUB_KEYS or key in _DOCKER_HUB_KEYS else host


def _credentials(entry: Mapping[str, Any], host: str, path: Path | None) -> Credentials | None:
    encoded = entry.get("auth")
    if isinstance(encoded, str) and encoded:
        try:
            decoded = base64.b64decode(encoded, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            decoded = ""
        username, separator, password = decoded.partition(":")
        if not separator:
            raise ImageError(
                f"Docker config {path}: the auth entry for {host} is not base64 of user:password",
                hint=f"run docker login {host} again",
            )
        return Credentials(username, password)
    user, secret = entry.get("username"), entry.get("password")
    if isinstance(user, str) and isinstance(secret, str) and user:
        return Credentials(user, secret)
    return None


@dataclass(frozen=True)
class Challenge:
    """One `WWW-Authenticate` challenge: the scheme and its parameters (realm, service, scope)."""

    scheme: str
    parameters: Mapping[str, str]

    @classmethod
    def parse(cls, header: str) -> Challenge | None:
        """The first challenge of a header, or None when it is empty or garbled."""
        scheme, _, rest = header.strip().partition(" ")
        if not scheme:
            return None
        parameters = {
            match.group(1).lower(): (
                match.group(3)
                if match.group(2) is None
                else re.sub(r"\\(.)", r"\1", match.group(2))
            )
            for match in _CHALLENGE_PARAMETER.finditer(rest)
        }
        return cls(scheme=scheme.lower(), parameters=parameters)
