#!/usr/bin/env bash
# Installs the Debian packages the tests use, creates .venv and installs the project with its
# development tools. Idempotent: a second run only checks that everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system-deps.sh
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
