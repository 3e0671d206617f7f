"""The real Coordinator of tests/cli, for certificates the sidecars can use."""

from tests.cli.conftest import cluster, tee_dir

__all__ = ["cluster", "tee_dir"]
