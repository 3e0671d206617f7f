"""What the ConfigMap history relies on, as the real API server does it (the conformance suite in
tests/history runs the same store on it for everything every backend shares).

Each case below is one documented behaviour of the API server that `contrast.history.configmaps`
builds on, forced deterministically: another writer changes the object between the store's read
and its write (409 Conflict on the stale `resourceVersion`; 409 AlreadyExists on a create), an
object over 1 MiB (the server's own 422, below the history's check), a ConfigMap edited by hand.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from contrast.history.configmaps import ConfigMapStore, core_api, object_name
from contrast.history.errors import ConcurrentUpdate, EntryTooLarge, HistoryError
from contrast.history.history import MAXIMUM_ENTRY_SIZE
from tests.kube.cluster import Cluster

HEAD = "transitions/latest"


class WriteAfterRead:
    """A CoreV1Api whose first read of a ConfigMap is followed by `other`, another writer's
    change: the moment between a compare-and-swap's read and its write, made certain."""

    def __init__(self, api: Any, other: Callable[[], object]) -> None:
        self._api = api
        self._other: Callable[[], object] | None = other

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def read_namespaced_config_map(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._api.read_namespaced_config_map(*args, **kwargs)
        finally:
            other, self._other = self._other, None
            if other is not None:
                other()


@pytest.fixture
def namespace(kube_cluster: Cluster) -> Iterator[str]:
    name = kube_cluster.namespace("history-api")
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false")


def store(cluster: Cluster, namespace: str) -> ConfigMapStore:
    return ConfigMapStore(core_api(kubeconfig=cluster.kubeconfig), namespace)


def test_a_replace_over_a_stale_resource_version_is_a_lost_update(
    kube_cluster: Cluster, namespace: str
) -> None:
    writer = store(kube_cluster, namespace)
    writer.compare_and_swap(HEAD, None, b"one")
    other = store(kube_cluster, namespace)
    api = WriteAfterRead(
        core_api(kubeconfig=kube_cluster.kubeconfig),
        lambda: other.compare_and_swap(HEAD, b"one", b"other's"),
    )
    late = ConfigMapStore(api, namespace)
    with pytest.raises(ConcurrentUpdate, match="changed while it was being updated"):
        late.compare_and_swap(HEAD, b"one", b"late")  # read "one", then a PUT with its version
    assert store(kube_cluster, namespace).get(HEAD) == b"other's"


def test_the_api_server_answers_409_conflict_on_the_stale_version(
    kube_cluster: Cluster, namespace: str
) -> None:
    """The status the store maps, as the server sends it (not the store's own reading of it)."""
    from kubernetes.client.exceptions import ApiException

    store(kube_cluster, namespace).compare_and_swap(HEAD, None, b"one")
    api = core_api(kubeconfig=kube_cluster.kubeconfig)
    found = api.read_namespaced_config_map(object_name(HEAD), namespace)
    store(kube_cluster, namespace).compare_and_swap(HEAD, b"one", b"two")
    found.binary_data = {"value": base64.b64encode(b"stale").decode()}
    with pytest.raises(ApiException) as raised:
        api.replace_namespaced_config_map(object_name(HEAD), namespace, found)
    assert raised.value.status == 409
    assert json.loads(raised.value.body)["reason"] == "Conflict"


def test_a_create_of_a_name_another_writer_created_is_a_lost_update(
    kube_cluster: Cluster, namespace: str
) -> None:
    other = store(kube_cluster, namespace)
    api = WriteAfterRead(
        core_api(kubeconfig=kube_cluster.kubeconfig),
        lambda: other.compare_and_swap(HEAD, None, b"first"),
    )
    with pytest.raises(ConcurrentUpdate):
        ConfigMapStore(api, namespace).compare_and_swap(HEAD, None, b"second")  # read a 404
    assert store(kube_cluster, namespace).get(HEAD) == b"first"


def test_a_missing_entry_is_none_and_a_swap_over_a_value_is_lost(
    kube_cluster: Cluster, namespace: str
) -> None:
    missing = store(kube_cluster, namespace)
    assert missing.get(HEAD) is None  # a 404
    with pytest.raises(ConcurrentUpdate):
        missing.compare_and_swap(HEAD, b"expected", b"value")
    assert missing.get(HEAD) is None


def test_the_api_server_refuses_more_than_one_mib_itself(
    kube_cluster: Cluster, namespace: str
) -> None:
    """The store, asked below the history's own size check, meets the server's: 1 MiB of data is
    stored, one byte more is refused with 422 Invalid and reported as too large."""
    raw = store(kube_cluster, namespace)
    largest = b"\xff" * MAXIMUM_ENTRY_SIZE
    raw.put("policies/largest", largest)
    assert store(kube_cluster, namespace).get("policies/largest") == largest
    with pytest.raises(EntryTooLarge, match="422"):
        raw.put("policies/larger", largest + b"\xff")
    with pytest.raises(EntryTooLarge, match="422"):
        raw.compare_and_swap(HEAD, None, largest + b"\xff")
    assert raw.names("policies") == ["largest"]


def test_a_configmap_edited_by_hand_is_a_clear_error(kube_cluster: Cluster, namespace: str) -> None:
    raw = store(kube_cluster, namespace)
    raw.compare_and_swap(HEAD, None, b"head")
    patch = {"binaryData": None, "data": {"value": "edited"}}
    kube_cluster.kubectl(
        "patch", "configmap", object_name(HEAD), "-n", namespace, "--type=merge",
        "-p", json.dumps(patch),
    )  # fmt: skip
    with pytest.raises(HistoryError, match=f"ConfigMap {namespace}/.* has no binaryData.value"):
        store(kube_cluster, namespace).get(HEAD)


def test_a_namespace_that_does_not_exist_reads_empty_and_refuses_writes(
    kube_cluster: Cluster,
) -> None:
    absent = store(kube_cluster, "contrast-no-such-namespace")
    assert absent.get(HEAD) is None
    with pytest.raises(HistoryError, match="404 Not Found") as raised:
        absent.put("manifests/ab", b"value")
    assert not isinstance(raised.value, ConcurrentUpdate)
    assert 'namespaces "contrast-no-such-namespace" not found' in str(raised.value)
