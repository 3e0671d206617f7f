"""The reference-value entries of the emulated platforms: each admits one emulated TEE's evidence.

Apart from the verifier (`manifest.verifier`, which reads these entries back), so that `generate`
writes the entry of its emulated platform without loading the verifiers of every TEE. Each entry
names the emulated TEE's own roots (`TrustedRoots`), which real evidence never chains to; the model
(`manifest.model`) reads them back as an `SnpEntry` or `TdxEntry` with their roots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives import serialization

from contrast.attestation.snp import reference as snp_reference
from contrast.manifest.model import EMULATED_SNP, EMULATED_TDX, PLATFORM, TRUSTED_ROOTS

if TYPE_CHECKING:
    from cryptography import x509

    from contrast.attestation.emulated.snp import EmulatedSnp
    from contrast.attestation.emulated.tdx import EmulatedTdx


def _pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def emulated_snp_reference_values(tee: EmulatedSnp) -> dict[str, Any]:
    """The manifest entry that admits evidence of this emulated TEE (and nothing real)."""
    product = tee.product
    roots = tee.roots.for_product(product)
    assert roots is not None
    reference = snp_reference.SnpReferenceValues(
        measurements=frozenset({tee.measurement}),
    )
    return {
        PLATFORM: EMULATED_SNP,
        **reference.to_json(),
        TRUSTED_ROOTS: {"ARK": _pem(roots.ark), "ASK": _pem(roots.ask)},
    }


def emulated_tdx_reference_values(tee: EmulatedTdx) -> dict[str, Any]:
    """The manifest entry that admits quotes of this emulated TDX TEE (and nothing real)."""
    # Imported here: the TDX modules are not needed for an SNP entry.
    from contrast.attestation.emulated.tdx import DEFAULT_MR_TD, DEFAULT_XFAM  # noqa: PLC0415
    from contrast.attestation.tdx import reference as tdx_reference  # noqa: PLC0415

    reference = tdx_reference.TdxReferenceValues(
        mr_td=frozenset({DEFAULT_MR_TD}), xfam=DEFAULT_XFAM, emulated=True
    )
    roots = tee.roots
    return {
        PLATFORM: EMULATED_TDX,
        **reference.to_json(),
        TRUSTED_ROOTS: {
            "RootCA": _pem(roots.root),
            "TcbSigning": [_pem(certificate) for certificate in roots.tcb_signing],
        },
    }
