"""Default reference values: built entries are accepted by the manifest verifier; gaps are named."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from contrast.attestation.snp.launch import GuestImage, launch_digest
from contrast.attestation.snp.report import Product
from contrast.attestation.tdx.measure import (
    TdvfSection,
    TdvfSectionType,
    mrtd,
    predict,
)
from contrast.attestation.tee import Tee
from contrast.manifest import verifier
from contrast.manifest.defaults import (
    ReferenceValuesUnavailable,
    default_reference_values,
    load_embedded,
    missing_value_notes,
    snp_reference_values,
    tdx_reference_values,
    update_embedded,
)
from contrast.manifest.model import Manifest, ReferenceValues, SnpEntry, TdxEntry
from contrast.platforms import PLATFORMS, Platform, by_name
from tests.attestation.tdx.test_measure import _firmware, _pe
from tests.conftest import ATTESTATION_DATA, require_shared

OVMF = Path(__file__).parents[1] / "attestation" / "snp" / "fixtures" / "ovmf_AmdSev_suffix.bin"
REAL = [platform for platform in PLATFORMS if not platform.emulated]
SNP = [platform for platform in REAL if platform.tee is Tee.SNP]
TDX = [platform for platform in REAL if platform.tee is Tee.TDX]
RTMR0 = hashlib.sha384(b"RTMR0 of a known-good boot").digest()
KERNEL = _pe(trailing=bytes(0x1000))  # a PE image the size of a bzImage setup header and more


@pytest.fixture(scope="module")
def snp_image(tmp_path_factory: pytest.TempPathFactory) -> GuestImage:
    folder = tmp_path_factory.mktemp("snp-image")
    (folder / "bzImage").write_bytes(b"a kernel")
    (folder / "initrd").write_bytes(b"an initrd")
    return GuestImage(OVMF, folder / "bzImage", folder / "initrd", "console=hvc0")


def _tdx_firmware() -> bytes:
    bfv = TdvfSection(0, 0x1000, 0xFFFFF000, 0x1000, TdvfSectionType.BFV, 1)
    return _firmware([bfv], b"\x5a" * 0x1000)


def _built(platform: Platform, snp_image: GuestImage) -> list[dict[str, Any]]:
    if platform.name == "aks-clh-snp":
        # An IGVM launch: entries as a release would add them by hand (ABIMinor 31 on AKS).
        entries = snp_reference_values(snp_image, by_name("metal-qemu-snp"))
        for entry in entries:
            entry["Platform"] = platform.display_name
            entry["GuestPolicy"]["ABIMinor"] = 31
        return entries
    if platform.tee is Tee.SNP:
        return snp_reference_values(snp_image, platform)
    measured = predict(_tdx_firmware(), KERNEL, b"initrd", "console=hvc0", rtmr0=RTMR0)
    return tdx_reference_values(platform, measured)


def _unfilled(values: dict[str, Any]) -> list[str]:
    return ReferenceValues.from_json(values).unfilled()


def _accepted(values: dict[str, list[dict[str, Any]]]) -> verifier.ManifestVerifier:
    """Parse the entries the way the Coordinator and the CLI do (a ManifestError if refused)."""
    coordinator = {"SANs": ["coordinator"], "Role": "coordinator"}
    document = {"Policies": {"ab" * 32: coordinator}, "ReferenceValues": values}
    manifest = Manifest.from_bytes(json.dumps(document).encode())
    return verifier.workload_verifier(manifest)


@pytest.mark.parametrize("platform", REAL, ids=lambda p: p.name)
def test_built_defaults_are_accepted_by_the_verifier(
    platform: Platform, snp_image: GuestImage, tmp_path: Path
) -> None:
    path = tmp_path / "reference-values.json"
    update_embedded(path, platform, _built(platform, snp_image))
    values, notes = default_reference_values(platform, embedded=load_embedded(path))
    assert set(values) == {platform.tee.value}
    entries = values[platform.tee.value]
    assert all(entry["Platform"] == platform.display_name for entry in entries)
    _accepted(values)
    assert notes == missing_value_notes(platform)
    assert platform.display_name in notes[0]
    assert "manifest.json" in notes[0]
    if platform.tee is Tee.SNP:
        assert len(entries) == 16
        assert all(entry["MinimumTCB"] == dict.fromkeys(
            ["BootloaderVersion", "TEEVersion", "SNPVersion", "MicrocodeVersion"]
        ) for entry in entries)  # fmt: skip
        assert all(f in notes[0] for f in ("MinimumTCB", "BootloaderVersion", "MicrocodeVersion"))
    else:
        assert len(entries) == 1
        assert entries[0]["MrSeam"] is None
        assert "MrSeam" in notes[0]


def test_aks_igvm_digests_are_not_faked(snp_image: GuestImage) -> None:
    with pytest.raises(ReferenceValuesUnavailable, match="IGVM"):
        snp_reference_values(snp_image, by_name("aks-clh-snp"))


@pytest.mark.parametrize(
    "platform", [p for p in SNP if p.name != "aks-clh-snp"], ids=lambda p: p.name
)
def test_snp_entries_pin_digests_and_policy(platform: Platform, snp_image: GuestImage) -> None:
    entries = snp_reference_values(snp_image, platform)
    keys = [(entry["ProductName"], entry["TrustedMeasurement"]) for entry in entries]
    expected = [
        (product.value, launch_digest(snp_image, vcpus=vcpus, vcpu_type=product).hex())
        for product in (Product.MILAN, Product.GENOA)
        for vcpus in range(1, 9)
    ]
    assert keys == expected
    policy = entries[0]["GuestPolicy"]
    assert policy["ABIMajor"] == 0
    assert policy["ABIMinor"] == 0
    assert policy["SMT"] is True
    assert not any(policy[key] for key in ("Debug", "MigrateMA", "SingleSocket", "CXLAllowed"))
    assert entries[0]["PlatformInfo"]["SMTEnabled"] is True
    assert entries[0]["PlatformInfo"]["TSMEEnabled"] is False
    parsed = verifier._snp_entry(SnpEntry.from_json(entries[0], "snp[0]"))
    assert parsed.product is Product.MILAN
    assert not parsed.reference.allow_debug


def test_gpu_and_plain_platforms_keep_their_own_entries(
    snp_image: GuestImage, tmp_path: Path
) -> None:
    path = tmp_path / "reference-values.json"
    plain, gpu = by_name("metal-qemu-snp"), by_name("metal-qemu-snp-gpu")
    update_embedded(path, plain, _built(plain, snp_image))
    gpu_image = GuestImage(OVMF, snp_image.kernel, snp_image.initrd, "console=hvc0 nvidia")
    update_embedded(path, gpu, snp_reference_values(gpu_image, gpu))
    embedded = load_embedded(path)
    assert set(embedded) == {plain.runtime_class_name, gpu.runtime_class_name}
    plain_values, _ = default_reference_values(plain, embedded=embedded)
    gpu_values, _ = default_reference_values(gpu, embedded=embedded)
    plain_digests = {e["TrustedMeasurement"] for e in plain_values["snp"]}
    gpu_digests = {e["TrustedMeasurement"] for e in gpu_values["snp"]}
    assert not plain_digests & gpu_digests
    assert {e["Platform"] for e in gpu_values["snp"]} == {"Metal-QEMU-SNP-GPU"}


@pytest.mark.parametrize("platform", TDX, ids=lambda p: p.name)
def test_tdx_entry_pins_mrtd_and_rtmrs(platform: Platform) -> None:
    entry = tdx_reference_values(
        platform, predict(_tdx_firmware(), KERNEL, b"initrd", "console=hvc0", rtmr0=RTMR0)
    )[0]
    assert entry["MrTd"] == mrtd(_tdx_firmware()).hex()
    assert entry["Rtmrs"][0] == RTMR0.hex()
    assert entry["Rtmrs"][3] == "00" * 48
    assert entry["Xfam"] == "e702060000000000"
    parsed = verifier._tdx_entry(TdxEntry.from_json(entry, "tdx[0]"))
    assert parsed.reference.td_attributes == (1 << 28).to_bytes(8, "little")
    assert not parsed.reference.emulated
    assert missing_value_notes(platform, [entry]) == missing_value_notes(platform)
    assert _unfilled({"tdx": [entry]}) == [f"tdx[0] ({platform.display_name}) MrSeam"]


@pytest.mark.parametrize("platform", TDX, ids=lambda p: p.name)
def test_tdx_rtmr0_without_a_known_good_boot_is_an_operator_value(platform: Platform) -> None:
    without_rtmr0 = predict(_tdx_firmware(), KERNEL, None, "console=hvc0")
    entry = tdx_reference_values(platform, without_rtmr0)[0]
    assert entry["Rtmrs"][0] is None
    assert entry["Rtmrs"][1] == without_rtmr0.rtmrs[1].hex()
    assert entry["Rtmrs"][2] == without_rtmr0.rtmrs[2].hex()
    notes = missing_value_notes(platform, [entry])
    assert len(notes) == 2
    assert "Rtmrs[0] (RTMR0) is expected missing" in notes[1]
    assert _unfilled({"tdx": [entry]}) == [
        f"tdx[0] ({platform.display_name}) MrSeam",
        f"tdx[0] ({platform.display_name}) Rtmrs[0]",
    ]
    _accepted({"tdx": [entry]})  # a valid entry: RTMR0 unchecked until the operator sets it
    filled = {**entry, "MrSeam": "ab" * 48, "Rtmrs": [RTMR0.hex(), *entry["Rtmrs"][1:]]}
    assert _unfilled({"tdx": [filled]}) == []


@pytest.mark.parametrize("platform", REAL, ids=lambda p: p.name)
def test_shipped_defaults_are_accepted_or_say_what_is_missing(platform: Platform) -> None:
    if platform.runtime_class_name in load_embedded():
        values, notes = default_reference_values(platform)
        _accepted(values)
        assert notes
        return
    with pytest.raises(ReferenceValuesUnavailable) as raised:
        default_reference_values(platform)
    assert platform.display_name in str(raised.value)
    assert ("TrustedMeasurement" if platform.tee is Tee.SNP else "MrTd") in str(raised.value)
    assert "contrast runtime build" in (raised.value.hint or "")


@pytest.mark.parametrize("platform", [p for p in PLATFORMS if p.emulated], ids=lambda p: p.name)
def test_emulated_platforms_have_no_defaults(platform: Platform) -> None:
    with pytest.raises(ReferenceValuesUnavailable, match="emulated"):
        default_reference_values(platform)


def test_wrong_tee_and_bad_files_are_refused(snp_image: GuestImage, tmp_path: Path) -> None:
    with pytest.raises(ReferenceValuesUnavailable, match="not SNP"):
        snp_reference_values(snp_image, by_name("metal-qemu-tdx"))
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ReferenceValuesUnavailable, match="map runtime handlers"):
        load_embedded(bad)
    bad.write_text("{not json")
    with pytest.raises(ReferenceValuesUnavailable, match="cannot read"):
        load_embedded(bad)


def test_cli_measures_and_embeds(snp_image: GuestImage, tmp_path: Path) -> None:
    from contrast.cli.main import main

    output = tmp_path / "reference-values.json"
    assert snp_image.kernel is not None
    snp = ["runtime", "reference-values", "--platform", "metal-qemu-snp", "--firmware", str(OVMF),
           "--kernel", str(snp_image.kernel), "--cmdline", "console=hvc0", "--max-vcpus", "2",
           "--output", str(output)]  # fmt: skip
    assert main(snp) == 0
    firmware, kernel = tmp_path / "tdvf.fd", tmp_path / "bzImage"
    firmware.write_bytes(_tdx_firmware())
    kernel.write_bytes(KERNEL)
    require_shared()
    golden = ATTESTATION_DATA / "tdx" / "gtg-cos-113-ccel-v4"
    tdx = ["runtime", "reference-values", "--platform", "metal-qemu-tdx", "--firmware",
           str(firmware), "--kernel", str(kernel), "--cmdline", "console=hvc0", "--tdx-event-log",
           str(golden / "ccel_table.bin"), str(golden / "ccel_data.bin")]  # fmt: skip
    assert main([*tdx, "--output", str(output)]) == 0
    embedded = load_embedded(output)
    snp_values, _ = default_reference_values(by_name("metal-qemu-snp"), embedded=embedded)
    tdx_values, _ = default_reference_values(by_name("metal-qemu-tdx"), embedded=embedded)
    assert len(snp_values["snp"]) == 4
    # RTMR0 of the known-good boot is the replayed RTMR0 of that quote's event log.
    assert tdx_values["tdx"][0]["Rtmrs"][0].startswith("3fa2f61f395b7f5f")
    _accepted(snp_values | tdx_values)
    # Without RTMR0 the entry leaves it to the operator, and says so; `set` refuses it until then.
    assert main([*tdx[:10], "--output", str(output)]) == 0
    tdx_values, notes = default_reference_values(
        by_name("metal-qemu-tdx"), embedded=load_embedded(output)
    )
    assert tdx_values["tdx"][0]["Rtmrs"][0] is None
    assert any("RTMR0" in note for note in notes)
