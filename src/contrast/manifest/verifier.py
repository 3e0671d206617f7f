"""Evidence verifiers built from a manifest's reference values.

A peer passes if any reference-value entry of its platform accepts its evidence (as the original:
"a workload passes if any entry validates it"). Real platforms are checked against the genuine
AMD and Intel roots shipped in the package; only entries of an emulated platform name their own
roots (`TrustedRoots`), so emulated evidence can never meet real reference values.
"""

from __future__ import annotations

import hmac
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from contrast.atls.peer import AttestedPeer
from contrast.attestation import certificates
from contrast.attestation.errors import AttestationError, Reason
from contrast.attestation.evidence import Evidence, Tee
from contrast.attestation.snp import reference as snp_reference
from contrast.attestation.snp import verify as snp_verify
from contrast.attestation.snp.report import Product
from contrast.attestation.snp.trust import GENUINE_AMD_ROOTS, AmdRootStore, ProductRoots
from contrast.attestation.tdx import reference as tdx_reference
from contrast.attestation.tdx import verify as tdx_verify
from contrast.attestation.tdx.collateral import load_collateral
from contrast.attestation.tdx.trust import GENUINE_INTEL_ROOTS, IntelRootStore
from contrast.manifest import model
from contrast.manifest.errors import ManifestReferenceMismatch
from contrast.manifest.model import Manifest

POLICY_HASH_SIZE = 32


@dataclass(frozen=True)
class SnpEntry:
    platform: str
    reference: snp_reference.SnpReferenceValues
    roots: AmdRootStore
    product: Product | None


@dataclass(frozen=True)
class TdxEntry:
    platform: str
    reference: tdx_reference.TdxReferenceValues
    roots: IntelRootStore


def _tdx_entry(entry: model.TdxEntry) -> TdxEntry:
    """The entry with the roots its evidence must chain to: Intel's, or its emulated TEE's."""
    if entry.roots is None:
        return TdxEntry(entry.platform, entry.reference, GENUINE_INTEL_ROOTS)
    where = entry.where
    root = certificates.load_certificate(entry.roots.root_ca.encode(), what=where)
    signing = tuple(
        certificates.load_certificate(pem.encode(), what=where) for pem in entry.roots.tcb_signing
    )
    return TdxEntry(entry.platform, entry.reference, IntelRootStore(root, signing, genuine=False))


def _snp_entry(entry: model.SnpEntry) -> SnpEntry:
    """The entry with the roots its evidence must chain to: AMD's, or its emulated TEE's."""
    reference = entry.reference
    if entry.roots is None:
        return SnpEntry(entry.platform, reference, GENUINE_AMD_ROOTS, reference.product)
    where = entry.where
    ark = certificates.load_certificate(entry.roots.ark.encode(), what=f"{where} ARK")
    ask = certificates.load_certificate(entry.roots.ask.encode(), what=f"{where} ASK")
    chosen = reference.product or Product.MILAN
    roots = AmdRootStore({chosen: ProductRoots(ark, ask)}, genuine=False)
    return SnpEntry(entry.platform, reference, roots, chosen)


class ManifestVerifier:
    """Accepts evidence that meets any entry of its platform and carries the expected data."""

    def __init__(
        self,
        snp: Sequence[SnpEntry],
        tdx: Sequence[TdxEntry] = (),
        *,
        allowed_policy_hashes: Collection[bytes] | None = None,
    ) -> None:
        self._snp = tuple(snp)
        self._tdx = tuple(tdx)
        self._allowed = None if allowed_policy_hashes is None else frozenset(allowed_policy_hashes)

    def verify(self, evidence: Evidence, *, report_data: bytes, now: datetime) -> AttestedPeer:
        if evidence.platform is Tee.SNP:
            peer = self._verify_snp(evidence, report_data=report_data, now=now)
        else:
            peer = self._verify_tdx(evidence, report_data=report_data, now=now)
        if self._allowed is not None and peer.policy_hash not in self._allowed:
            raise ManifestReferenceMismatch(
                "policy hash",
                " or ".join(sorted(h.hex() for h in self._allowed)) or "(none)",
                peer.policy_hash.hex(),
                hint="pass --coordinator-policy-hash if the Coordinator runs another policy",
            )
        return peer

    def _verify_snp(self, evidence: Evidence, *, report_data: bytes, now: datetime) -> AttestedPeer:
        if not self._snp:
            raise ManifestReferenceMismatch(
                "platform", "TDX (the manifest has no SNP entries)", "SNP"
            )
        chain, crl = certificates.split_endorsements(
            evidence.endorsements, what="an SNP endorsement"
        )
        failures: list[AttestationError] = []
        for entry in self._snp:
            try:
                verified = snp_verify.verify_evidence(
                    evidence.report,
                    chain,
                    now=now,
                    roots=entry.roots,
                    product=entry.product,
                    crl=crl,
                )
                snp_reference.validate_report(verified, entry.reference)
            except AttestationError as error:
                failures.append(error)
                continue
            _check_report_data(verified.report.report_data, report_data)
            return AttestedPeer(Tee.SNP, verified.report.host_data, verified.claims())
        raise _most_telling(failures)

    def _verify_tdx(self, evidence: Evidence, *, report_data: bytes, now: datetime) -> AttestedPeer:
        if not self._tdx:
            raise ManifestReferenceMismatch(
                "platform", "SNP (the manifest has no TDX entries)", "TDX"
            )
        # Collateral (TCB info, QE identity, CRLs) travels with the quote, as the QGS gives it.
        collateral = load_collateral(evidence.endorsements) if evidence.endorsements else None
        failures: list[AttestationError] = []
        for entry in self._tdx:
            try:
                verified = tdx_verify.verify_quote_bytes(
                    evidence.report, now=now, roots=entry.roots, collateral=collateral
                )
                tdx_reference.validate_quote(verified, entry.reference)
            except AttestationError as error:
                failures.append(error)
                continue
            body = verified.quote.body
            _check_report_data(body.report_data, report_data)
            if any(body.mr_config_id[POLICY_HASH_SIZE:]):
                raise ManifestReferenceMismatch(
                    "MrConfigId[32:48]", "zero (a 32-byte policy hash)", body.mr_config_id.hex()
                )
            return AttestedPeer(Tee.TDX, body.mr_config_id[:POLICY_HASH_SIZE], verified.claims())
        raise _most_telling(failures)


def _check_report_data(actual: bytes, expected: bytes) -> None:
    if not hmac.compare_digest(actual, expected):
        raise ManifestReferenceMismatch(
            "report data",
            "SHA-512(public key ‖ nonce)",
            "other bytes",
            hint="the evidence was made for another key or nonce (replayed?)",
        )


def _most_telling(failures: Sequence[AttestationError]) -> AttestationError:
    """With several entries, a reference mismatch says more than an untrusted chain."""
    for failure in failures:
        if failure.reason not in (Reason.UNTRUSTED_VCEK, Reason.UNTRUSTED_PCK):
            return failure
    return failures[0]


def _entries(manifest: Manifest) -> tuple[list[SnpEntry], list[TdxEntry]]:
    values = manifest.reference_values
    return [_snp_entry(entry) for entry in values.snp], [_tdx_entry(entry) for entry in values.tdx]


def workload_verifier(manifest: Manifest) -> ManifestVerifier:
    """For the Coordinator: any workload of the manifest's platforms (policy checked later)."""
    snp, tdx = _entries(manifest)
    return ManifestVerifier(snp, tdx)


def coordinator_verifier(manifest: Manifest, policy_hashes: Collection[bytes]) -> ManifestVerifier:
    """For the CLI: a Coordinator on the manifest's platforms running one of `policy_hashes`."""
    snp, tdx = _entries(manifest)
    return ManifestVerifier(snp, tdx, allowed_policy_hashes=policy_hashes)
