"""The bytes `generate` writes for a manifest with every field set, pinned.

Pinned from the writer before the manifest became one type (commit "tests/manifest: pin ..."), so
a change to the model that changes a byte of `manifest.json` shows here. The emulated entries'
certificates are made fresh by each run (real emulated TEEs), so the pinned text names them by
placeholders, replaced by their JSON strings before comparing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from contrast.attestation.emulated.snp import EmulatedSnp
from contrast.attestation.emulated.tdx import EmulatedTdx
from contrast.attestation.snp.launch import GuestImage
from contrast.attestation.snp.report import Product
from contrast.attestation.tdx.measure import predict
from contrast.generate import manifest as generated
from contrast.generate.keys import OwnerKeys
from contrast.manifest.defaults import snp_reference_values, tdx_reference_values
from contrast.manifest.emulated import emulated_snp_reference_values, emulated_tdx_reference_values
from contrast.manifest.model import Manifest, ReferenceValues
from contrast.platforms import by_name
from tests.attestation.tdx.test_measure import _pe
from tests.manifest.test_defaults import OVMF, RTMR0, _tdx_firmware

ASSETS = Path(__file__).parent / "assets"
SEEDSHARE_KEYS = tuple((ASSETS / "seedshare-public-keys.txt").read_text().split())
WORKLOAD_OWNERS = (hashlib.sha256(b"owner 1").hexdigest(), hashlib.sha256(b"owner 2").hexdigest())


def _identities() -> list[generated.WorkloadIdentity]:
    def identity(seed: str, name: str, secret: str = "", role: str = "") -> Any:
        policy_hash = hashlib.sha256(seed.encode()).hexdigest()
        return generated.WorkloadIdentity(policy_hash, name, secret, role, f"file: Pod/{name}")

    return [
        identity("coordinator", "coordinator", role="coordinator"),
        identity("web", "web", secret="web-secret"),
        identity("db", "db"),
        identity("ünïcode", "naïve-ñame", secret="sëcret"),  # json's \u escapes, pinned
    ]


def _reference_values(tmp_path: Path) -> dict[str, list[dict[str, Any]]]:
    (tmp_path / "bzImage").write_bytes(b"a kernel")
    (tmp_path / "initrd").write_bytes(b"an initrd")
    image = GuestImage(OVMF, tmp_path / "bzImage", tmp_path / "initrd", "console=hvc0")
    snp = snp_reference_values(
        image, by_name("metal-qemu-snp"), products=[Product.MILAN], vcpu_counts=[1, 2]
    )
    kernel = _pe(trailing=bytes(0x1000))
    tdx_full = predict(_tdx_firmware(), kernel, b"initrd", "console=hvc0", rtmr0=RTMR0)
    tdx_no_rtmr0 = predict(_tdx_firmware(), kernel, b"initrd", "console=hvc0")
    tdx = tdx_reference_values(by_name("metal-qemu-tdx"), tdx_full)
    tdx += tdx_reference_values(by_name("metal-qemu-tdx"), tdx_no_rtmr0)
    snp.append(emulated_snp_reference_values(EmulatedSnp(tmp_path / "snp-tee")))
    tdx.append(emulated_tdx_reference_values(EmulatedTdx(tmp_path / "tdx-tee")))
    return {"snp": snp, "tdx": tdx}


def _written(tmp_path: Path, threshold: int) -> bytes:
    values = _reference_values(tmp_path)
    keys = OwnerKeys(WORKLOAD_OWNERS, SEEDSHARE_KEYS)
    manifest = generated.manifest(
        _identities(), ReferenceValues.from_json(values), keys, seedshare_threshold=threshold
    )
    return manifest.to_bytes()


def _placeholders(tmp_path: Path) -> dict[str, str]:
    """Each emulated certificate's placeholder in the pinned text and its JSON string."""
    snp = json.loads(_written(tmp_path, 1))["ReferenceValues"]
    emulated_snp = snp["snp"][-1]["TrustedRoots"]
    emulated_tdx = snp["tdx"][-1]["TrustedRoots"]
    pems = {
        "@SNP-ARK@": emulated_snp["ARK"],
        "@SNP-ASK@": emulated_snp["ASK"],
        "@TDX-ROOT@": emulated_tdx["RootCA"],
        **{f"@TDX-TCB-{i}@": pem for i, pem in enumerate(emulated_tdx["TcbSigning"])},
    }
    return {json.dumps(name): json.dumps(pem) for name, pem in pems.items()}


@pytest.mark.parametrize("threshold", [1, 2])
def test_generate_writes_the_pinned_bytes(tmp_path: Path, threshold: int) -> None:
    written = _written(tmp_path, threshold)
    expected = (ASSETS / f"pinned-manifest-threshold-{threshold}.json").read_text()
    for placeholder, pem in _placeholders(tmp_path).items():
        expected = expected.replace(placeholder, pem)
    assert written == expected.encode()


@pytest.mark.parametrize("threshold", [1, 2])
def test_a_read_manifest_is_written_back_byte_for_byte(tmp_path: Path, threshold: int) -> None:
    written = _written(tmp_path, threshold)
    manifest = Manifest.from_bytes(written)
    assert manifest.to_bytes() == written
    assert manifest.seedshare_threshold == threshold
    assert manifest.reference_values.unfilled() == [
        *(
            f"snp[{i}] (Metal-QEMU-SNP) MinimumTCB.{name}"
            for i in (0, 1)
            for name in ("BootloaderVersion", "TEEVersion", "SNPVersion", "MicrocodeVersion")
        ),
        "tdx[0] (Metal-QEMU-TDX) MrSeam",
        "tdx[1] (Metal-QEMU-TDX) MrSeam",
        "tdx[1] (Metal-QEMU-TDX) Rtmrs[0]",
    ]
    assert [entry.emulated for entry in manifest.reference_values.entries] == [
        False, False, True, False, False, True
    ]  # fmt: skip
