"""One entry point for "is this evidence valid?", whichever TEE produced it.

The CLI's `evidence verify` uses it to turn raw files into a `Verdict`: authentic or not, why,
and the claims a verifier may rely on. Refusals are values here, not exceptions, so callers can
print or serialise them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from contrast.attestation import certificates
from contrast.attestation.errors import AttestationError, AttestationPackageError, Reason
from contrast.attestation.snp import verify as snp_verify
from contrast.attestation.snp.report import Product
from contrast.attestation.snp.trust import GENUINE_AMD_ROOTS, AmdRootStore
from contrast.attestation.tee import Tee

if TYPE_CHECKING:
    from contrast.attestation.tdx.trust import IntelRootStore

# The TDX verifier is imported where it is used: it costs `contrast evidence verify` of SNP
# evidence a third of its start-up (collateral parsing, PCK extensions, quote layouts).
_Roots = TypeVar("_Roots", AmdRootStore, "IntelRootStore")


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one piece of evidence."""

    platform: Tee
    reason: Reason | None = None
    detail: str | None = None
    claims: Mapping[str, Any] | None = field(default=None)

    @property
    def valid(self) -> bool:
        return self.reason is None

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": "valid" if self.valid else "invalid",
            "reason": None if self.reason is None else str(self.reason),
            "detail": self.detail,
            "platform": str(self.platform),
            "claims": dict(self.claims) if self.claims is not None else None,
        }


def verify_snp(
    report: bytes,
    *,
    endorsements: Sequence[bytes],
    now: datetime,
    product: str | None = None,
    roots: AmdRootStore = GENUINE_AMD_ROOTS,
) -> Verdict:
    """Verify an SNP report with the VCEK/VLEK (and optionally CRL) files given."""
    try:
        chain, crl = certificates.split_endorsements(endorsements, what="SNP endorsement")
        verified = snp_verify.verify_evidence(
            report,
            chain,
            now=now,
            roots=roots,
            product=Product(product) if product else None,
            crl=crl,
        )
    except AttestationError as error:
        return Verdict(Tee.SNP, error.reason, error.explain())
    return Verdict(Tee.SNP, claims=verified.claims())


def verify_tdx(
    quote: bytes,
    *,
    collateral: Sequence[bytes],
    now: datetime,
    roots: IntelRootStore | None = None,
) -> Verdict:
    """Verify a TDX quote, with collateral (TCB info, QE identity, CRLs) if given.

    `roots` defaults to Intel's genuine roots.
    """
    from contrast.attestation.tdx import verify as tdx_verify  # noqa: PLC0415
    from contrast.attestation.tdx.collateral import load_collateral  # noqa: PLC0415
    from contrast.attestation.tdx.trust import GENUINE_INTEL_ROOTS  # noqa: PLC0415

    roots = GENUINE_INTEL_ROOTS if roots is None else roots
    try:
        bundle = load_collateral(collateral) if collateral else None
        verified = tdx_verify.verify_quote_bytes(quote, now=now, roots=roots, collateral=bundle)
    except AttestationError as error:
        return Verdict(Tee.TDX, error.reason, error.explain())
    return Verdict(Tee.TDX, claims=verified.claims())


def emulated_snp_roots(state_dir: Path) -> AmdRootStore:
    """The roots of the emulated SNP TEE whose state is in `state_dir`, only read, never made."""
    # Imported here: the emulated TEEs cost `contrast evidence verify` 50 ms it rarely needs.
    from contrast.attestation.emulated.snp import load_roots  # noqa: PLC0415

    return _require_roots(load_roots(state_dir), state_dir, "SNP")


def emulated_tdx_roots(state_dir: Path) -> IntelRootStore:
    """The roots of the emulated TDX TEE whose state is in `state_dir`, only read, never made."""
    from contrast.attestation.emulated.tdx import load_roots  # noqa: PLC0415

    return _require_roots(load_roots(state_dir), state_dir, "TDX")


def _require_roots(roots: _Roots | None, state_dir: Path, tee: str) -> _Roots:
    if roots is None:
        raise AttestationPackageError(
            f"no emulated {tee} roots in {state_dir}",
            hint="pass the directory the emulated TEE was created in (e.g. WORKDIR/.state/tee)",
        )
    return roots
