"""Every benchmark in one command: `.venv/bin/python -m bench [--quick]` from the repository root.

Each script runs as its own process (what it measures must not share a warm interpreter with
the others) and prints its figures next to its baseline and goal. `--quick` skips generate at
1000 workloads, the Envoy mesh, the NewMeshCert loads and the image build, which take
longest. Nothing here runs in the tests.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (script, arguments, what it shows); in the order issue 14's table lists them.
RUNS: list[tuple[str, list[str], str]] = [
    ("bench_cli.py", [], "CLI start-up as whole processes"),
    ("bench_generate.py", ["10"], "generate, 10 workloads"),
    ("bench_generate.py", ["100"], "generate, 100 workloads"),
    ("bench_generate.py", ["1000"], "generate, 1000 workloads"),
    ("bench_snp.py", [], "SNP verification against one raw P-384 check"),
    ("bench_tdx.py", [], "TDX verification against its raw checks"),
    ("bench_images.py", [], "image layer reading against sha256"),
    ("bench_layer_write.py", [], "image layer writing against raw gzip of the same bytes"),
    ("bench_meshcert.py", [], "Coordinator NewMeshCert, 64 client processes"),
    ("bench_meshcert.py", ["64", "10", "3"], "NewMeshCert, 64 clients over 3 replicas"),
    ("bench_rejoin.py", [], "a killed Coordinator replica ready again"),
    ("bench_rpc_status.py", [], "the Coordinator's error mapping on a round trip"),
    ("bench_mesh.py", [], "a request through two Envoy sidecars"),
    ("bench_release_images.py", [], "release image build, sizes, Coordinator container start"),
    ("bench_cluster.py", [], "the test cluster's start with cached binaries (root)"),
    ("bench_history_api.py", [], "the history head on the real API server against files (root)"),
    ("bench_history_scale.py", [], "SetManifest at 10 000 policies; history at update 1 vs 1000"),
    ("bench_history_flat.py", [], "set, verify, GetManifests, restart at update 1 vs 1000 (root)"),
    ("bench_history_workloads.py", [], "10 000 workloads: certificates, recovery, real-size gRPC"),
    ("bench_set_resources.py", [], "set's reading of 10 000 workload files' policies"),
    ("bench_set_cli.py", [], "contrast set through the CLI, 10 000 workloads"),
    ("bench_pod_start.py", [], "a pod's start under the emulated runtime against runc (root)"),
    ("bench_pod_certs.py", [], "mesh certificates per second from pods on the cluster (root)"),
    ("bench_meshcert_issue.py", [], "issuing one mesh leaf against one raw P-384 signature"),
    ("bench_runtime_call.py", [], "one emulated-runtime runc call that the policy judges"),
]
SLOW = {
    ("bench_generate.py", "1000"),
    ("bench_mesh.py", ""),
    ("bench_meshcert.py", ""),
    ("bench_meshcert.py", "64103"),
    ("bench_release_images.py", ""),
    ("bench_cluster.py", ""),
    ("bench_history_api.py", ""),
    ("bench_history_scale.py", ""),
    ("bench_history_flat.py", ""),
    ("bench_history_workloads.py", ""),
    ("bench_set_resources.py", ""),
    ("bench_set_cli.py", ""),
    ("bench_pod_start.py", ""),
    ("bench_pod_certs.py", ""),
}


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    failed = []
    for script, arguments, title in RUNS:
        if quick and (script, "".join(arguments)) in SLOW:
            continue
        print(f"== {title} ({script} {' '.join(arguments)})".rstrip(), flush=True)
        started = time.perf_counter()
        code = subprocess.run([sys.executable, str(HERE / script), *arguments], check=False)
        print(f"   ({time.perf_counter() - started:.0f} s)\n", flush=True)
        if code.returncode != 0:
            failed.append(script)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
