"""Prometheus metrics of one Coordinator (names as the original's).

A pod with mesh API workers (`contrast.coordinator.workers`) has one /metrics, the Coordinator
process's: each worker counts in a `CoordinatorMetrics` of its own and reports its counters'
values to the Coordinator, which adds what they grew by to its own counters (`add`), so the
counters the endpoint serves are the whole pod's.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

# A counter's sample: its name as the registry collects it (without `_total`) and its labels,
# sorted by name.
CounterKey = tuple[str, tuple[tuple[str, str], ...]]


class CoordinatorMetrics:
    """Each Coordinator has its own registry, so tests can run several in one process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._counters: dict[str, tuple[Counter, tuple[str, ...]]] = {}
        self.manifest_generation = Gauge(
            "contrast_coordinator_manifest_generation",
            "Number of manifests in the active history.",
            registry=self.registry,
        )
        self.attestation_failures = self._counter(
            "contrast_meshapi_attestation_failures",
            "NewMeshCert requests refused because their evidence failed verification.",
        )
        # As go-grpc-prometheus, which the original's servers use: every call by its status.
        self.rpcs_handled = self._counter(
            "grpc_server_handled",
            "RPCs completed on the server, by status code.",
            ("grpc_type", "grpc_service", "grpc_method", "grpc_code"),
        )
        self.mesh_certificates = self._counter(
            "contrast_meshapi_certificates_issued", "Mesh certificates issued."
        )

    def _counter(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Counter:
        counter = Counter(name, documentation, labels, registry=self.registry)
        self._counters[name] = (counter, labels)
        return counter

    def counter_values(self) -> dict[CounterKey, float]:
        """Every counter's value, by name and labels (what a worker reports)."""
        values: dict[CounterKey, float] = {}
        for family in self.registry.collect():
            if family.name not in self._counters:
                continue
            for sample in family.samples:
                if sample.name == f"{family.name}_total":
                    values[(family.name, tuple(sorted(sample.labels.items())))] = sample.value
        return values

    def add(self, key: CounterKey, amount: float) -> None:
        """Count `amount` more on the counter `key` names: KeyError for a counter or labels this
        registry does not have, ValueError for a negative amount (counters only grow)."""
        name, labels = key
        counter, label_names = self._counters[name]
        names = dict(labels)
        if sorted(names) != sorted(label_names):
            raise KeyError(f"{name} has the labels {list(label_names)}, not {sorted(names)}")
        (counter.labels(**names) if names else counter).inc(amount)
