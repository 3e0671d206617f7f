"""Shared fixtures: where the conformance data lives.

The attestation vectors are kept outside the repository in ../shared/testdata (CI has them there
too); tests read them in place rather than copying them in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.imagebuild.builder import BuiltImages, build_into
from tests.kube.cluster import kube_cluster  # noqa: F401 - the session fixture of the real cluster

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
ATTESTATION_DATA = SHARED / "testdata" / "attestation"

# Signature checks take milliseconds and CI has two cores: no per-example deadline, and a bounded
# number of examples so the whole suite stays well inside CI's time.
settings.register_profile(
    "default", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("default")


@dataclass(frozen=True)
class Vector:
    """One folder of ../shared/testdata/attestation/{snp,tdx}/ with its expected.json."""

    path: Path
    expected: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"

    def file(self, key: str) -> bytes:
        return (self.path / self.expected["files"][key]).read_bytes()

    def shared_file(self, relative: str) -> bytes:
        """A file named relative to the attestation data folder (roots, collateral)."""
        return (ATTESTATION_DATA / relative).read_bytes()


def load_vectors(kind: str) -> list[Vector]:
    """All vectors of `kind` ("snp" or "tdx"), or an empty list when ../shared is missing."""
    folder = ATTESTATION_DATA / kind
    if not folder.is_dir():
        return []
    return [
        Vector(path, json.loads((path / "expected.json").read_text()))
        for path in sorted(folder.iterdir())
        if (path / "expected.json").is_file()
    ]


def require_shared() -> None:
    if not ATTESTATION_DATA.is_dir():
        pytest.fail(
            f"conformance data not found at {ATTESTATION_DATA}: clone shared/ beside the repo"
        )


def expected_snp_claims(facts: dict[str, Any]) -> dict[str, Any]:
    """The claims a verifier must report for an SNP vector, from its expected.json `report`."""
    tcb = facts["reported_tcb"]
    return {
        "version": facts["version"],
        "product": facts["product"],
        "signing_key": facts["signing_key"].lower(),
        "guest_policy": int(facts["policy"], 16),
        "vmpl": facts["vmpl"],
        "measurement": facts["measurement"],
        "report_data": facts["report_data"],
        "host_data": facts["host_data"],
        "chip_id": facts["chip_id"],
        "reported_tcb": {
            "bootloader": tcb["bl"],
            "tee": tcb["tee"],
            "snp": tcb["snp"],
            "microcode": tcb["ucode"],
            "fmc": tcb.get("fmc"),
        },
        "platform_info": int(facts["platform_info"], 16),
    }


@pytest.fixture(scope="session")
def built_images(tmp_path_factory: pytest.TempPathFactory) -> BuiltImages:
    """The release images of this checkout, built for real once per session."""
    return build_into(tmp_path_factory.mktemp("images") / "layout")
