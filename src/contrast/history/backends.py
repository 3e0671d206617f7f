"""Which store a Coordinator keeps its history in, chosen by `--history`.

`files`: a directory on a persistent volume (one replica per volume; the embedded demo's).
`configmaps`: ConfigMaps in the Coordinator's namespace, shared by any number of replicas.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from contrast.history.configmaps import ConfigMapStore, core_api, namespace_in_cluster
from contrast.history.errors import HistoryError
from contrast.history.store import FileSystemStore, Store


class HistoryBackend(StrEnum):
    FILES = "files"
    CONFIGMAPS = "configmaps"


def open_store(
    backend: HistoryBackend,
    *,
    state_dir: Path,
    namespace: str | None = None,
    kubeconfig: Path | None = None,
) -> Store:
    """The store of `backend`: ConfigMaps in `namespace` (default: the Pod's own, in a cluster)."""
    if backend is HistoryBackend.FILES:
        return FileSystemStore(state_dir)
    namespace = namespace or namespace_in_cluster()
    if namespace is None:
        raise HistoryError(
            "no namespace for the ConfigMap history",
            hint="pass --namespace, or run in a Pod with a service account",
        )
    return ConfigMapStore(core_api(kubeconfig=kubeconfig), namespace)
