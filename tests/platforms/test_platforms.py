"""The platform table and runtime class names."""

from __future__ import annotations

import re

import pytest

from contrast.platforms import PLATFORMS, PlatformError, by_name, from_runtime_class

DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize("platform", PLATFORMS, ids=lambda p: p.name)
def test_runtime_class_names_are_dns_labels_and_parse_back(platform: object) -> None:
    from contrast.platforms import Platform

    assert isinstance(platform, Platform)
    name = platform.runtime_class_name
    assert DNS_1123_LABEL.fullmatch(name)
    assert len(name) <= 63
    assert from_runtime_class(name) is platform
    assert from_runtime_class(platform.placeholder) is platform


def test_gpu_variant_is_not_mistaken_for_its_base() -> None:
    assert from_runtime_class("contrast-cc-metal-qemu-snp-gpu") is by_name("metal-qemu-snp-gpu")
    assert from_runtime_class("contrast-cc-metal-qemu-snp-0123abcd") is by_name("metal-qemu-snp")


@pytest.mark.parametrize("name", ["contrast-cc", "kata-cc", "contrast-cc-unknown", "runc"])
def test_other_names_are_no_platform(name: str) -> None:
    assert from_runtime_class(name) is None


def test_lookup_ignores_case_and_explains_unknown_names() -> None:
    assert by_name("Metal-QEMU-TDX").tee == "tdx"
    with pytest.raises(PlatformError, match="unknown platform 'nope'"):
        by_name("nope")


def test_overhead_follows_the_original() -> None:
    assert by_name("metal-qemu-snp").pod_overhead_mib == 682
    assert by_name("metal-qemu-snp-gpu").pod_overhead_mib == 1194
