"""On the emulated platforms the Coordinator and the Initializer take their evidence from the
emulated runtime's per-pod socket (`CONTRAST_TEE=emulated`); elsewhere from the hardware.

Before, coordinator-resources wrote `hardware` for every platform and generate injected no
`CONTRAST_TEE` (the default, hardware): under the emulated runtime neither could attest.
"""

from __future__ import annotations

from typing import Any

from contrast.kuberesource import inject, release
from contrast.kuberesource.workloads import Workload
from contrast.platforms import by_name
from tests.kuberesource.builders import pod_spec, resource


def _tee(container: dict[str, Any]) -> str | None:
    values = [v["value"] for v in container.get("env", []) if v["name"] == "CONTRAST_TEE"]
    assert len(values) <= 1
    return values[0] if values else None


def _coordinator_tee(platform: str) -> str | None:
    resources = release.coordinator_resources(by_name(platform))
    (statefulset,) = [r for r in resources if r["kind"] == "StatefulSet"]
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    return _tee(container)


def test_the_coordinator_takes_the_emulated_tee_only_on_emulated_platforms() -> None:
    assert _coordinator_tee("emulated-snp") == "emulated"
    assert _coordinator_tee("emulated-tdx") == "emulated"
    assert _coordinator_tee("metal-qemu-snp") == "hardware"
    assert _coordinator_tee("metal-qemu-tdx") == "hardware"


def _initializer(workload: Workload) -> dict[str, Any]:
    (initializer,) = [
        c for c in workload.pod_spec["initContainers"] if c["name"] == inject.INITIALIZER_NAME
    ]
    return initializer


def test_the_initializer_follows_the_platform_when_injected_again() -> None:
    workload = Workload(resource("Pod", pod_spec()))
    assert inject.inject(workload, coordinator_namespace="ns", emulated=True)
    assert _tee(_initializer(workload)) == "emulated"
    assert inject.inject(workload, coordinator_namespace="ns", emulated=True) is False
    # The same pod generated for a hardware platform: the default again, no variable.
    assert inject.inject(workload, coordinator_namespace="ns") is True
    assert _tee(_initializer(workload)) is None
    hardware = Workload(resource("Pod", pod_spec()))
    inject.inject(hardware, coordinator_namespace="ns")
    assert _tee(_initializer(hardware)) is None
