#!/usr/bin/env bash
# All checks CI runs: lint, types, tests. Run after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
ruff check src tests bench
ruff format --check src tests bench
mypy
pytest -q "$@"
