"""Runtime classes: `contrast-cc` follows the flag, platform names win over it, others are left."""

from __future__ import annotations

from pathlib import Path

import pytest

from contrast.kuberesource import runtimeclass, yamlio
from contrast.kuberesource.runtimeclass import RuntimeClassError, platform_for
from contrast.kuberesource.workloads import Workload
from contrast.platforms import PLATFORMS, Platform, by_name

from .builders import pod_spec, resource, validate

TESTDATA = Path(__file__).parent / "testdata"
SNP = by_name("metal-qemu-snp")
TDX = by_name("metal-qemu-tdx")


@pytest.mark.parametrize(
    ("runtime_class", "flag", "expected"),
    [
        ("contrast-cc", SNP, "metal-qemu-snp"),
        ("contrast-cc", by_name("emulated-tdx"), "emulated-tdx"),
        ("kata-cc-isolation", by_name("aks-clh-snp"), "aks-clh-snp"),
        ("contrast-cc-metal-qemu-tdx", SNP, "metal-qemu-tdx"),
        ("contrast-cc-metal-qemu-tdx", None, "metal-qemu-tdx"),
        ("contrast-cc-metal-qemu-snp-gpu", SNP, "metal-qemu-snp-gpu"),
        ("contrast-cc-metal-qemu-tdx-gpu", None, "metal-qemu-tdx-gpu"),
        ("contrast-cc-aks-clh-snp", TDX, "aks-clh-snp"),
        ("contrast-cc-k3s-qemu-snp", TDX, "k3s-qemu-snp"),
        ("contrast-cc-emulated-snp", TDX, "emulated-snp"),
        ("contrast-cc-emulated-tdx", None, "emulated-tdx"),
        ("contrast-cc-metal-qemu-snp-0badc0de", TDX, "metal-qemu-snp"),  # another release
        ("contrast-cc-metal-qemu-snp-gpu-0badc0de", None, "metal-qemu-snp-gpu"),
        ("", SNP, None),
        ("runc", SNP, None),
        ("kata-qemu", None, None),
        ("contrast-ccx", SNP, None),
    ],
)
def test_resolution_table(runtime_class: str, flag: Platform | None, expected: str | None) -> None:
    platform = platform_for(runtime_class, flag)
    assert (platform.name if platform else None) == expected


@pytest.mark.parametrize("platform", PLATFORMS, ids=lambda p: p.name)
def test_every_placeholder_and_versioned_name_resolves(platform: Platform) -> None:
    assert platform_for(platform.placeholder, None) == platform
    assert platform_for(platform.runtime_class_name, None) == platform


def test_contrast_cc_without_a_platform_is_an_error_with_a_hint() -> None:
    workload = Workload(resource("Deployment", pod_spec(runtimeClassName="contrast-cc")), "a.yml")
    with pytest.raises(RuntimeClassError) as error:
        runtimeclass.resolve(workload, None)
    assert "a.yml: Deployment/app" in str(error.value)
    assert error.value.hint is not None
    assert "--reference-values" in error.value.hint
    assert "contrast-cc-metal-qemu-snp" in error.value.hint


def test_unknown_contrast_platform_is_an_error() -> None:
    with pytest.raises(RuntimeClassError, match="names no known platform"):
        platform_for("contrast-cc-metal-qemu-sev", SNP)


def test_multi_runtime_example() -> None:
    path = TESTDATA / "multi-runtime.yml"
    resources = yamlio.load(path)
    choices = runtimeclass.resolve_all(resources.workloads(), TDX)
    assert [(c.workload.name, c.platform.name if c.platform else None) for c in choices] == [
        ("coordinator", "metal-qemu-tdx"),
        ("snp-app", "metal-qemu-snp"),
        ("tdx-app", "metal-qemu-tdx"),
        ("plain", None),
        ("runc", None),
    ]
    assert [p.name for p in runtimeclass.used_platforms(choices)] == [
        "metal-qemu-snp", "metal-qemu-tdx",
    ]  # fmt: skip
    changed = [
        runtimeclass.set_runtime_class(c.workload, c.platform) for c in choices if c.platform
    ]
    assert changed == [True, True, True]
    assert [c.workload.runtime_class_name for c in choices] == [
        TDX.runtime_class_name, SNP.runtime_class_name, TDX.runtime_class_name, "", "runc",
    ]  # fmt: skip
    text = resources.dump()
    # The comment stays (ruamel keeps its column, or one space after a longer value).
    assert f"runtimeClassName: {SNP.runtime_class_name} # placeholder: wins over the flag" in text
    assert text.count("image: busybox") == 2
    for document in resources.documents:
        validate(document)
    # A second run on the output changes nothing.
    again = yamlio.load_text(text, path)
    for choice in runtimeclass.resolve_all(again.workloads(), TDX):
        if choice.platform is not None:
            assert not runtimeclass.set_runtime_class(choice.workload, choice.platform)
    assert not again.changed


def test_resolution_reads_without_changing() -> None:
    resources = yamlio.load(TESTDATA / "multi-runtime.yml")
    runtimeclass.resolve_all(resources.workloads(), SNP)
    assert not resources.changed
