"""Prometheus metrics of one Coordinator (names as the original's)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class CoordinatorMetrics:
    """Each Coordinator has its own registry, so tests can run several in one process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.manifest_generation = Gauge(
            "contrast_coordinator_manifest_generation",
            "Number of manifests in the active history.",
            registry=self.registry,
        )
        self.attestation_failures = Counter(
            "contrast_meshapi_attestation_failures",
            "NewMeshCert requests refused because their evidence failed verification.",
            registry=self.registry,
        )
        # As go-grpc-prometheus, which the original's servers use: every call by its status.
        self.rpcs_handled = Counter(
            "grpc_server_handled_total",
            "RPCs completed on the server, by status code.",
            ["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
            registry=self.registry,
        )
        self.mesh_certificates = Counter(
            "contrast_meshapi_certificates_issued",
            "Mesh certificates issued.",
            registry=self.registry,
        )
