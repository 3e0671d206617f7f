#!/usr/bin/env bash
# All checks CI runs: lint, types, tests. Run after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
ruff check src tests bench
ruff format --check src tests bench
mypy
# The test cluster's binaries (Kubernetes, etcd, CoreDNS from tools/kubernetes/go.mod), built
# before the tests rather than inside the first test that needs them, and not by setup.sh, so that
# the demo needs no Go: cached per go.mod and go.sum, so only a first run or a changed pin builds.
bash scripts/cluster.sh build >/dev/null
pytest -q "$@"
