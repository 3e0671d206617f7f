"""The committed protobuf modules are what scripts/protoc.sh makes from the .proto files."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import REPO

API = REPO / "src" / "contrast" / "api"


def test_generated_modules_are_up_to_date(tmp_path: Path) -> None:
    subprocess.run(["bash", str(REPO / "scripts" / "protoc.sh"), str(tmp_path)], check=True)
    generated = sorted(path.name for path in tmp_path.iterdir())
    assert generated == sorted(path.name for path in API.glob("*_pb2.py*"))
    for name in generated:
        assert (tmp_path / name).read_bytes() == (API / name).read_bytes(), (
            f"{name} is stale: run bash scripts/protoc.sh"
        )
