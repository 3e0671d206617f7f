"""Pinning rewrites images to `repo:tag@digest` once, and refuses a conflicting digest."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from contrast.kuberesource import yamlio
from contrast.kuberesource.pinning import (
    PinningError,
    is_pinned,
    pin_images,
    pinned_reference,
    split_digest,
)
from contrast.kuberesource.workloads import Workload

from .builders import pod_spec, resource, validate

TESTDATA = Path(__file__).parent / "testdata"
A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("nginx", f"nginx@{A}"),
        ("nginx:1.27", f"nginx:1.27@{A}"),
        ("localhost:5000/app:v1", f"localhost:5000/app:v1@{A}"),
        ("localhost:5000/app", f"localhost:5000/app@{A}"),
        (f"ghcr.io/x/app:v1@{A}", f"ghcr.io/x/app:v1@{A}"),
        (f"ghcr.io/x/app@{A}", f"ghcr.io/x/app@{A}"),
    ],
)
def test_pinned_reference(image: str, expected: str) -> None:
    pinned = pinned_reference(image, A)
    assert pinned == expected
    assert pinned_reference(pinned, A) == pinned
    assert is_pinned(pinned)
    assert split_digest(pinned) == (expected.partition("@")[0], A)


def test_conflicting_and_malformed_digests() -> None:
    with pytest.raises(PinningError, match="pinned to"):
        pinned_reference(f"app:v1@{A}", B)
    for bad in ["", "sha256", "abc", "sha256:short", "nginx:1.27"]:
        with pytest.raises(PinningError, match="not a digest"):
            pinned_reference("app:v1", bad)


def test_pin_images_in_all_containers_once() -> None:
    spec = pod_spec(initContainers=[{"name": "init", "image": "busybox:1.36"}])
    spec["containers"].append({"name": "other", "image": "unknown:1"})
    document = resource("Deployment", spec)
    workload = Workload(document)
    digests = {"ghcr.io/example/app:v1": A, "busybox:1.36": B}
    assert pin_images(workload, digests) is True
    assert [c["image"] for c in workload.all_containers()] == [
        f"busybox:1.36@{B}", f"ghcr.io/example/app:v1@{A}", "unknown:1",
    ]  # fmt: skip
    validate(document)
    before = copy.deepcopy(document)
    assert pin_images(workload, digests) is False
    # Keyed by the pinned string (a resolver run on the output): still nothing to do.
    assert pin_images(workload, {f"busybox:1.36@{B}": B}) is False
    assert document == before


def test_pinning_keeps_the_rest_of_the_file() -> None:
    resources = yamlio.load(TESTDATA / "helm-template.yaml")
    (statefulset,) = resources.workloads()
    assert pin_images(statefulset, {"ghcr.io/example/shop-api:v0.3.1": A})
    text = resources.dump()
    assert f'image: "ghcr.io/example/shop-api:v0.3.1@{A}"' in text
    assert "# flow style, kept" in text
