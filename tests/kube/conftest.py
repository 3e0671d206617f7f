"""The Kubernetes tests' shared fixtures (the cluster is the session's: tests/conftest.py)."""

from tests.kube.cluster import release_layout  # noqa: F401 - this checkout's release images
