"""Default reference values per platform: what a release's guest image measures to.

As in the original (research/contrast.md §3.4), the defaults are computed from the guest image at
release build time and embedded as `assets/reference-values.json`, keyed by runtime handler name
(`contrast-cc-<platform>-<hash>`, so a runtime's values never apply to another version of it):

    {"contrast-cc-metal-qemu-snp-1a2b3c4d": {"snp": [...]},
     "contrast-cc-metal-qemu-tdx-5e6f7a8b": {"tdx": [...]}}

`contrast runtime build` (from a Kata release, into the workspace's `reference-values.json`) and
`contrast runtime reference-values` (file by file) are that build step: they measure the image
(SNP: one entry per product Milan/Genoa × vCPU count 1–8, with sev-snp-measure; TDX: MRTD and
RTMR1–3 predicted from firmware, kernel, cmdline and initrd, RTMR0 from a known-good boot or left
to the operator) and write the entries into the file (not for AKS-CLH-SNP, which boots an IGVM
image that sev-snp-measure cannot measure; its entries, with ABIMinor 31, must come from
igvmmeasure). This repository has no guest image, so the shipped file is empty; for a platform
without entries `default_reference_values` raises an error that says what is missing and how to
produce it, rather than inventing values.

Values only the operator knows are "expected missing" (the original's term): written as `null`
(which the verifier reads as "not checked") and named in the notes returned next to the values, so
`contrast generate` can tell the user what to fill in: the bare-metal SNP `MinimumTCB`, and the TDX
`MrSeam` and, unless a known-good boot gave it, `Rtmrs[0]`. Emulated platforms are not handled
here: their entries name the emulated TEE's roots
(`manifest.emulated`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from contrast.attestation.snp.launch import (
    DEFAULT_PRODUCTS,
    DEFAULT_VCPU_COUNTS,
    GuestImage,
    launch_digests,
)
from contrast.attestation.snp.reference import SnpReferenceValues
from contrast.attestation.snp.report import PlatformInfo, Product
from contrast.attestation.tdx.measure import TdxLaunchMeasurements
from contrast.attestation.tdx.reference import (
    CONTRAST_XFAM,
    SEPT_VE_DISABLE_ONLY,
    TdxReferenceValues,
)
from contrast.attestation.tee import Tee
from contrast.boundedfile import read_bounded
from contrast.files import write_atomically
from contrast.manifest.errors import ManifestError
from contrast.manifest.model import MINIMUM_TCB_FIELDS, PLATFORM, TdxEntry
from contrast.platforms import Hypervisor, Platform, from_runtime_class

ASSET = "reference-values.json"
# A reference values file is read whole (`contrast.boundedfile`): a release's is about 20 KiB.
EMBEDDED_MAX_BYTES = 16 << 20
# Guest policy ABI minor pinned by the original's validation (research §3.2): 0 on bare metal
# (`snpGuestPolicyQEMU.json`), 31 on AKS.
ABI_MINOR_BARE_METAL = 0
ABI_MINOR_AKS = 31
# `PlatformInfo: {SMTEnabled: true}`, everything else false: SMT allowed, TSME and TIO not.
FORBIDDEN_PLATFORM_INFO = PlatformInfo.TSME_EN | PlatformInfo.TIO_EN

ReferenceValueSet = dict[str, list[dict[str, Any]]]


class ReferenceValuesUnavailable(ManifestError):
    """No default reference values for a platform: emulated, or not built into this release."""


def snp_reference_values(
    image: GuestImage,
    platform: Platform,
    *,
    products: Iterable[Product] = DEFAULT_PRODUCTS,
    vcpu_counts: Iterable[int] = DEFAULT_VCPU_COUNTS,
) -> list[dict[str, Any]]:
    """Manifest entries for `image` on `platform`: one per (product, vCPU count)."""
    _require_real(platform, Tee.SNP)
    if platform.hypervisor is Hypervisor.CLOUD_HYPERVISOR:
        # AKS boots an IGVM image whose digest `igvmmeasure` computes (research §5.2); measuring
        # it as a QEMU/OVMF launch would give a value no AKS guest ever reports.
        raise ReferenceValuesUnavailable(
            f"{platform.display_name} boots an IGVM image; its launch digest cannot be computed"
            " with sev-snp-measure",
            hint="measure the IGVM file with igvmmeasure and add the entries to the file by hand",
        )
    abi_minor = ABI_MINOR_BARE_METAL
    entries = []
    for launch in launch_digests(image, products=products, vcpu_counts=vcpu_counts):
        reference = SnpReferenceValues(
            measurements=frozenset({launch.digest}),
            product=launch.product,
            minimum_abi_minor=abi_minor,
            allow_smt=True,
            platform_info_forbidden=FORBIDDEN_PLATFORM_INFO,
        )
        entry = {PLATFORM: platform.display_name, **reference.to_json()}
        entry["MinimumTCB"] = dict.fromkeys(MINIMUM_TCB_FIELDS)  # expected missing
        entries.append(entry)
    return entries


def tdx_reference_values(
    platform: Platform, measurements: TdxLaunchMeasurements
) -> list[dict[str, Any]]:
    """The manifest entry for a TD with these launch measurements.

    RTMR0 without a value (`measurements.rtmrs[0]` None) is written as `null` and is expected
    missing, like MrSeam: it measures the TD HOB and QEMU's ACPI tables, which depend on the VM's
    memory and vCPUs, so only a known-good boot of each VM size can say it.
    """
    _require_real(platform, Tee.TDX)
    rtmr0, rtmr1, rtmr2, rtmr3 = measurements.rtmrs
    reference = TdxReferenceValues(
        mr_td=frozenset({measurements.mr_td}),
        rtmrs=(rtmr0, rtmr1, rtmr2, rtmr3),
        xfam=CONTRAST_XFAM,
        td_attributes=SEPT_VE_DISABLE_ONLY,
    )
    entry = {PLATFORM: platform.display_name, **reference.to_json()}
    entry["MrSeam"] = None  # expected missing
    for unused in ("MrConfigId", "ReportData"):  # per workload / per connection, not per image
        entry.pop(unused)
    return [entry]


def missing_value_notes(platform: Platform, entries: Iterable[Mapping[str, Any]] = ()) -> list[str]:
    """What the user must fill in (in manifest.json) before the defaults protect anything."""
    _require_real(platform, platform.tee)
    where = (
        f'every ReferenceValues.{platform.tee.value} entry with "Platform":'
        f' "{platform.display_name}" in manifest.json'
    )
    if platform.tee is Tee.SNP:
        return [
            f"{platform.display_name}: MinimumTCB ({', '.join(MINIMUM_TCB_FIELDS)}) is expected"
            f" missing in {where}: set the lowest SEV firmware and microcode SPLs your hosts run"
            " (the reported_tcb of a host's report, `contrast evidence verify`); until then no TCB"
            " minimum is enforced"
        ]
    notes = [
        f"{platform.display_name}: MrSeam is expected missing in {where}: set the MRSEAM of the"
        " TDX module your hosts run (mr_seam of a quote, `contrast evidence verify`); until then"
        " any TDX module is accepted"
    ]
    if any(
        "Rtmrs[0]" in TdxEntry.from_json(entry, platform.display_name, check=False).unfilled
        for entry in entries
    ):
        notes.append(
            f"{platform.display_name}: Rtmrs[0] (RTMR0) is expected missing in {where}: it"
            " measures the TD HOB and QEMU's ACPI tables, which depend on the VM's memory and"
            " vCPUs; take it from a known-good boot's quote (rtmr0 of `contrast evidence"
            " verify`) or event log, one entry per VM size you run; until then RTMR0 is not"
            " checked"
        )
    return notes


def load_embedded(path: Path | None = None) -> dict[str, ReferenceValueSet]:
    """The release's reference values by runtime handler (the packaged file unless `path`)."""
    try:
        if path is None:
            text = resources.files("contrast.manifest").joinpath("assets", ASSET).read_text()
        else:
            text = read_bounded(
                path,
                EMBEDDED_MAX_BYTES,
                what="the reference values",
                hint="pass the reference-values.json contrast runtime build wrote",
            ).decode()
        document = json.loads(text)
    except (OSError, ValueError) as error:
        raise ReferenceValuesUnavailable(
            f"cannot read the embedded reference values: {error}"
        ) from None
    if not isinstance(document, dict) or not all(
        isinstance(values, dict) for values in document.values()
    ):
        raise ReferenceValuesUnavailable(
            "the embedded reference values must map runtime handlers to {snp, tdx} lists"
        )
    return document


def default_reference_values(
    platform: Platform,
    *,
    embedded: Mapping[str, ReferenceValueSet] | None = None,
    handler: str | None = None,
) -> tuple[ReferenceValueSet, list[str]]:
    """The entries of `platform`'s runtime (`handler`, default: this release's) by TEE kind,
    and notes on values the user must add."""
    _require_real(platform, platform.tee)
    handler = handler or platform.runtime_class_name
    values = (load_embedded() if embedded is None else embedded).get(handler)
    entries = [] if values is None else list(values.get(platform.tee.value, []))
    if not entries:
        measured = (
            "SNP launch digests (TrustedMeasurement per Milan/Genoa × 1–8 vCPUs)"
            if platform.tee is Tee.SNP
            else "TDX MrTd and Rtmrs"
        )
        raise ReferenceValuesUnavailable(
            f"this build has no reference values for {platform.display_name}"
            f" (runtime {handler}): {measured} are missing",
            hint=f"build the runtime from a Kata release with `contrast runtime build"
            f" --kata-release FILE --platform {platform.name}` in this workspace, or add"
            f" ReferenceValues.{platform.tee.value} entries with"
            f' "Platform": "{platform.display_name}" to manifest.json yourself',
        )
    copied = [dict(entry) for entry in entries]
    return {platform.tee.value: copied}, missing_value_notes(platform, copied)


def handlers_in(document: Mapping[str, Any]) -> dict[Platform, str]:
    """The runtime handler each platform has in a reference-values document (its keys).

    Two handlers of one platform are refused: which runtime the pods should use would be a guess.
    """
    found: dict[Platform, str] = {}
    for handler in sorted(document):
        platform = from_runtime_class(handler)
        if platform is None:
            continue
        if platform in found:
            raise ReferenceValuesUnavailable(
                f"the reference values name two runtimes of {platform.display_name}:"
                f" {found[platform]} and {handler}",
                hint="keep the entry of the runtime you install and remove the other",
            )
        found[platform] = handler
    return found


def update_embedded(
    path: Path, platform: Platform, entries: list[dict[str, Any]], *, handler: str | None = None
) -> dict[str, ReferenceValueSet]:
    """Set `platform`'s entries in the file at `path` (created if absent), atomically.

    They are keyed by `handler` (default: this release's runtime of the platform); entries of
    other runtimes of the same platform are removed, so the file names one runtime per platform.
    """
    _require_real(platform, platform.tee)
    handler = handler or platform.runtime_class_name
    document = load_embedded(path) if path.exists() else {}
    document = {
        key: value for key, value in document.items() if from_runtime_class(key) is not platform
    }
    document[handler] = {platform.tee.value: entries}
    text = json.dumps(dict(sorted(document.items())), indent=2) + "\n"
    write_atomically(path, text.encode())
    return document


def _require_real(platform: Platform, tee: Tee) -> None:
    if platform.emulated:
        raise ReferenceValuesUnavailable(
            f"{platform.display_name} has no default reference values: its entries name the"
            " emulated TEE's roots",
            hint="generate them from the emulated TEE's state (--emulated-tee)",
        )
    if platform.tee is not tee:
        raise ReferenceValuesUnavailable(
            f"{platform.display_name} is a {platform.tee.value.upper()} platform,"
            f" not {tee.value.upper()}"
        )
