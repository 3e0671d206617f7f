"""A history store in Kubernetes ConfigMaps, through the official `kubernetes` client.

Each key `<kind>/<name>` is one ConfigMap `contrast-store-<kind>-<name>` (as the original's
`configmapstore`), its value in `binaryData["value"]`, labelled so that a user can list them:

    kubectl get configmaps -l contrast.edgeless.systems/history=manifests

The backend relies on nothing but these documented behaviours of the API server, each one the
only thing that makes the corresponding operation safe:

- a GET without `resourceVersion` returns the most recent state (a quorum read), so reading the
  head before each certificate cannot see a superseded one
  (https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list);
  concurrent GETs of one key share one sent after each caller asked (`SharedReads`), which
  keeps that guarantee;
- a PUT that carries the `resourceVersion` the writer read fails with 409 Conflict when the object
  changed since: optimistic concurrency, our compare-and-swap of the head
  (https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions and the API
  conventions, "Concurrency Control and Consistency");
- a POST of a name that exists fails with 409 AlreadyExists: the first head, and sealed entries
  written once, have exactly one creator;
- a GET of a missing object is 404 NotFound (API conventions, "HTTP Status codes");
- an object whose data exceeds 1 MiB is refused with 422 Invalid ("The data stored in a ConfigMap
  cannot exceed 1 MiB", https://kubernetes.io/docs/concepts/configuration/configmap/). The
  history refuses such entries before sending them (`MAXIMUM_ENTRY_SIZE`), so every backend holds
  the same histories; a 422 is still mapped to the same error.

Every call has a deadline (`API_TIMEOUT`); a failure to reach the API is a `HistoryError` (the
Coordinator answers UNAVAILABLE), never a hang.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from contrast.history.errors import ConcurrentUpdate, EntryTooLarge, HistoryError
from contrast.history.shared import SharedReads
from contrast.history.store import check_key, check_kind

NAME_PREFIX = "contrast-store-"
VALUE_KEY = "value"
MANAGED_BY = {"app.kubernetes.io/managed-by": "contrast"}
KIND_LABEL = "contrast.edgeless.systems/history"
API_TIMEOUT = 10.0
# The API verbs the Coordinator calls on configmaps through this store: get (`get`, the head's
# read), create (`put`, a first head) and update (the head's compare-and-swap). The Role that
# `coordinator-resources` emits grants exactly these. `names` lists (verb list), but only tools and
# tests call it, with their own credentials: a Coordinator never does, so its Role has no list.
# tests/release/test_coordinator_rbac.py runs it on a real API server without each verb.
VERBS = ("create", "get", "update")
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# A DNS-1123 label: what a namespace name must be.
NAMESPACE_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

T = TypeVar("T")


def object_name(key: str) -> str:
    check_key(key)
    return NAME_PREFIX + key.replace("/", "-").lower()


class ConfigMapStore:
    """`Store` over ConfigMaps in one namespace; `api` is a `kubernetes.client.CoreV1Api`."""

    def __init__(self, api: Any, namespace: str) -> None:
        if not NAMESPACE_PATTERN.fullmatch(namespace):
            raise HistoryError(f"{namespace!r} is not a Kubernetes namespace name")
        self._api = api
        self.namespace = namespace
        # Every replica GETs the head before each certificate; overlapping GETs are shared
        # (never one sent before the caller asked: `contrast.history.shared`).
        self._reads: SharedReads[bytes | None] = SharedReads(self._get_unshared)

    def describe(self, key: str) -> str:
        return f"ConfigMap {self.namespace}/{object_name(key)}"

    def get(self, key: str) -> bytes | None:
        return self._reads.read(key)

    def _get_unshared(self, key: str) -> bytes | None:
        found = self._read(key)
        return None if found is None else found[0]

    def put(self, key: str, value: bytes) -> None:
        """Create the entry; one that exists already is left alone (its name is its content)."""
        with contextlib.suppress(ConcurrentUpdate):
            self._call(key, lambda: self._create(key, value))

    def put_many(self, entries: Mapping[str, bytes]) -> None:
        """One create after the other, in order: each is durable once the API server answers."""
        for key, value in entries.items():
            self.put(key, value)

    def compare_and_swap(self, key: str, expected: bytes | None, value: bytes) -> None:
        found = self._read(key)
        current, version = (None, None) if found is None else found
        if current != expected:
            raise _lost(key)
        if version is None:
            self._call(key, lambda: self._create(key, value))
            return
        body = self._body(key, value)
        body["metadata"]["resourceVersion"] = version
        self._call(
            key,
            lambda: self._api.replace_namespaced_config_map(
                object_name(key), self.namespace, body, _request_timeout=API_TIMEOUT
            ),
        )

    def names(self, kind: str) -> list[str]:
        check_kind(kind)
        selector = ",".join(f"{k}={v}" for k, v in {**MANAGED_BY, KIND_LABEL: kind}.items())
        listing = self._call(
            f"{kind}/*",
            lambda: self._api.list_namespaced_config_map(
                self.namespace, label_selector=selector, _request_timeout=API_TIMEOUT
            ),
        )
        prefix = f"{NAME_PREFIX}{kind.lower()}-"
        return sorted(
            item.metadata.name.removeprefix(prefix)
            for item in listing.items
            if item.metadata.name.startswith(prefix)
        )

    # ------------------------------------------------------------------------------------------

    def _read(self, key: str) -> tuple[bytes, str] | None:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 (see _client)

        try:
            found = self._api.read_namespaced_config_map(
                object_name(key), self.namespace, _request_timeout=API_TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise _api_error(key, error) from None
        except Exception as error:  # urllib3 and socket errors: the API cannot be reached
            raise _unreachable(key, error) from None
        encoded = (found.binary_data or {}).get(VALUE_KEY)
        if encoded is None:
            raise HistoryError(f"{self.describe(key)} has no binaryData.{VALUE_KEY}")
        try:
            value = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise HistoryError(f"{self.describe(key)} holds no base64 value") from None
        return value, str(found.metadata.resource_version)

    def _create(self, key: str, value: bytes) -> Any:
        return self._api.create_namespaced_config_map(
            self.namespace, self._body(key, value), _request_timeout=API_TIMEOUT
        )

    def _body(self, key: str, value: bytes) -> dict[str, Any]:
        kind = key.partition("/")[0]
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": object_name(key),
                "namespace": self.namespace,
                "labels": {**MANAGED_BY, KIND_LABEL: kind},
            },
            "binaryData": {VALUE_KEY: base64.b64encode(value).decode()},
        }

    def _call(self, key: str, call: Callable[[], T]) -> T:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 (see _client)

        try:
            return call()
        except ApiException as error:
            if error.status == 409:
                raise _lost(key) from None
            raise _api_error(key, error) from None
        except HistoryError:
            raise
        except Exception as error:
            raise _unreachable(key, error) from None


def _lost(key: str) -> ConcurrentUpdate:
    return ConcurrentUpdate(
        f"{key} changed while it was being updated",
        hint="another Coordinator replica changed it first; retry",
    )


# How much of the API server's own message an error quotes (one line, never a whole body).
MESSAGE_LIMIT = 300


def _server_message(error: Any) -> str:
    """The Status message the API server sent with `error` (what it refused and why: for a 403
    the user, verb and resource), on one line and bounded; empty if there is none."""
    try:
        message = json.loads(error.body)["message"]
    except (TypeError, ValueError, KeyError):
        return ""
    if not isinstance(message, str):
        return ""
    line = " ".join(message.split())
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 3] + "..."


def _api_error(key: str, error: Any) -> HistoryError:
    reason = f"{error.status} {error.reason}".strip()
    if message := _server_message(error):
        reason = f"{reason}: {message}"
    if error.status == 422:
        return EntryTooLarge(f"the Kubernetes API refused {key} as invalid ({reason})")
    if error.status in (401, 403):
        return HistoryError(
            f"the Kubernetes API refused access to {key} ({reason})",
            hint="apply the Role and RoleBinding of contrast coordinator-resources",
        )
    return HistoryError(f"the Kubernetes API failed on {key} ({reason})")


def _unreachable(key: str, error: Exception) -> HistoryError:
    return HistoryError(f"cannot reach the Kubernetes API for {key}: {type(error).__name__}")


def namespace_in_cluster() -> str | None:
    """The Pod's namespace as its service account token mount says, if there is one."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or None
    except OSError:
        return None


def core_api(*, kubeconfig: Path | None = None, host: str | None = None) -> Any:
    """A CoreV1Api: in-cluster config, a kubeconfig, or a plain `host` URL (tests, proxies).

    The client is imported here, not at the top: it takes a second to import, and only the
    Coordinator with the ConfigMap backend needs it.
    """
    from kubernetes import client, config  # noqa: PLC0415

    configuration = client.Configuration()
    try:
        if host is not None:
            configuration.host = host
        elif kubeconfig is not None:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                str(kubeconfig), client_configuration=configuration
            )
        else:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
    except config.ConfigException as error:
        raise HistoryError(
            f"no Kubernetes API configuration: {error}",
            hint="run in a Pod with a service account, or pass --kubeconfig",
        ) from None
    return client.CoreV1Api(client.ApiClient(configuration))
