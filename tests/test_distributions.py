"""The versions cache keys use are the ones importlib.metadata reports."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest

from contrast import distributions
from tests.fresh_python import printed_by

NAMES = [
    "jsonschema",
    "referencing",
    "jsonschema-specifications",
    "kubernetes-validate",
    "pydantic",
    "pydantic-core",
    "cryptography",
    "shamir-mnemonic",
    "gordon-to-regorus",
    "PyYAML",
    "ruamel.yaml",
    "no-such-distribution",
]


def _metadata_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_the_versions_importlib_metadata_reports() -> None:
    assert distributions.versions(NAMES) == [_metadata_version(name) for name in NAMES]
    assert distributions.versions(NAMES)[-1] is None


def test_the_first_directory_on_the_path_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Python imports the first one: a copy earlier on sys.path shadows the installed one."""
    (tmp_path / "PyYAML-99.1.dist-info").mkdir()
    (tmp_path / "jsonschema_specifications-1.2.dist-info").mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert distributions.versions(["pyyaml", "jsonschema-specifications"]) == ["99.1", "1.2"]


def test_finding_installed_versions_loads_no_metadata_parser() -> None:
    code = (
        "import sys; from contrast import distributions;"
        " distributions.versions(['jsonschema', 'PyYAML', 'gordon-to-regorus']);"
        " print('importlib.metadata' in sys.modules, 'email' in sys.modules)"
    )
    assert printed_by(code) == ["False", "False"]
