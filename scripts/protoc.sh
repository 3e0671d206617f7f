#!/usr/bin/env bash
# Regenerates the protobuf message modules in src/contrast/api from the .proto files beside them.
# With an argument, writes them to that directory instead (the tests compare the two).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath "${1:-$repo/src/contrast/api}")"
cd "$repo/src/contrast/api"
"$repo/.venv/bin/python" -m grpc_tools.protoc -I. --python_out="$out" --pyi_out="$out" ./*.proto
# protoc writes top-level imports ("import evidence_pb2"); make them absolute in our package.
sed -i 's/^import evidence_pb2 as/from contrast.api import evidence_pb2 as/' \
    "$out"/*_pb2.py "$out"/*_pb2.pyi
