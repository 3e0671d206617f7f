"""The history head's round trip on a real Kubernetes API server, against the file backend.

Every certificate a Coordinator replica issues reads the head first (`Store.get` of
`transitions/latest`: a quorum GET of one ConfigMap), and every SetManifest ends in the head's
compare-and-swap (that GET, then a PUT carrying its `resourceVersion`). Both are timed on the
ConfigMap store over the test cluster's API server (`scripts/cluster.sh`: etcd on a local disk,
TLS on loopback, the admin's client certificate) and on the file-system store in the same run,
taking turns; printed are the p50 latencies and their ratio, which is what a replica pays for
sharing its history through the API.

Run: `.venv/bin/python bench/bench_history_api.py [CALLS]`, with CONTRAST_TEST_CLUSTER=DIR naming
a cluster already up (`bash scripts/cluster.sh up DIR`); without it the script brings one up in a
temporary folder (minutes if the binaries are not built yet) and takes it down after.
"""

from __future__ import annotations

import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' cluster module

from tests.kube.cluster import Cluster, cluster_script

from contrast.history.configmaps import ConfigMapStore, core_api
from contrast.history.store import FileSystemStore, Store

HEAD = "transitions/latest"
ROUNDS = 5


@contextmanager
def cluster() -> Iterator[Cluster]:
    reuse = os.environ.get("CONTRAST_TEST_CLUSTER")
    if reuse:
        yield Cluster.at(Path(reuse).resolve())
        return
    directory = Path(tempfile.mkdtemp(prefix="contrast-kc-", dir="/tmp"))
    try:
        result = cluster_script("up", directory)
        if result.returncode != 0:
            sys.exit(f"the cluster did not start:\n{result.stderr.decode()[-3000:]}")
        yield Cluster.at(directory)
    finally:
        cluster_script("down", directory)
        shutil.rmtree(directory, ignore_errors=True)


def p50_ms(call: Callable[[], object], calls: int) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


class Swapper:
    """Compare-and-swap of the head over its current value, each time with new bytes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.current = store.get(HEAD)
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        value = b"head %d" % self.count
        self.store.compare_and_swap(HEAD, self.current, value)
        self.current = value


def main(calls: int) -> None:
    with cluster() as running, tempfile.TemporaryDirectory() as directory:
        namespace = f"bench-{secrets.token_hex(4)}"
        running.kubectl("create", "namespace", namespace)
        try:
            stores: dict[str, Store] = {
                "configmaps": ConfigMapStore(core_api(kubeconfig=running.kubeconfig), namespace),
                "files": FileSystemStore(Path(directory) / "state"),
            }
            for store in stores.values():
                store.compare_and_swap(HEAD, None, b"head 0")
            reads: dict[str, list[float]] = {name: [] for name in stores}
            swaps: dict[str, list[float]] = {name: [] for name in stores}
            swappers = {name: Swapper(store) for name, store in stores.items()}
            for _ in range(ROUNDS):  # taking turns, so both see the same machine load
                for name, store in stores.items():
                    reads[name].append(p50_ms(lambda store=store: store.get(HEAD), calls))
                    swaps[name].append(p50_ms(swappers[name], calls // 4))
        finally:
            running.kubectl("delete", "namespace", namespace, "--wait=false")
    for what, results in (("head read (GET)", reads), ("head compare-and-swap", swaps)):
        api, files = min(results["configmaps"]), min(results["files"])
        print(
            f"{what:22} p50: {api:7.3f} ms on the API server, {files:6.3f} ms on files"
            f" (ratio {api / files:.1f})"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
