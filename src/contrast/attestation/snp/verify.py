"""Is an SNP report authentic? The AMD chain, the VCEK/VLEK facts and the report signature.

Follows go-sev-guest's `verify.SnpAttestation` (research/attestation.md §2.6) with the checks in
an order chosen so that the most telling reason is reported when several fail: product first
(a certificate for another product line cannot be judged against this one's roots), then which
key kind signed, the chain, validity, revocation, then chip id and TCB (a genuine VCEK of another
chip also fails the signature, but "other chip" is what the operator needs to hear), and the
report signature last. Whether an authentic report is *acceptable* is `snp.reference`'s job.

Verified certificate signatures are cached by certificate bytes, so steady-state verification of
reports from known chips costs one P-384 ECDSA check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.attestation import certificates
from contrast.attestation.errors import MalformedEvidence, Reason, VerificationFailed
from contrast.attestation.memo import IdentityMemo
from contrast.attestation.snp import endorsement as endorsements
from contrast.attestation.snp.endorsement import Endorsement
from contrast.attestation.snp.report import (
    SIGNATURE_ALGO_ECDSA_P384_SHA384,
    SIGNED_SIZE,
    Product,
    Report,
    SigningKey,
)
from contrast.attestation.snp.trust import AmdRootStore, ProductRoots

_CACHE_SIZE = 1024


@dataclass(frozen=True)
class VerifiedReport:
    """An authentic report with the endorsement that vouches for it and its product."""

    report: Report
    endorsement: Endorsement
    product: Product

    def claims(self) -> dict[str, Any]:
        """The facts a relying party may use, in a JSON-friendly form."""
        report = self.report
        return {
            "version": report.version,
            "product": self.product.value,
            "signing_key": report.signing_key.label,
            "guest_policy": int(report.policy),
            "vmpl": report.vmpl,
            "measurement": report.measurement.hex(),
            "report_data": report.report_data.hex(),
            "host_data": report.host_data.hex(),
            "chip_id": report.chip_id.hex(),
            "reported_tcb": report.reported_tcb.components(),
            "platform_info": int(report.platform_info),
        }


def verify_evidence(
    report: bytes,
    chain: Sequence[x509.Certificate],
    *,
    now: datetime,
    roots: AmdRootStore,
    product: Product | None = None,
    crl: x509.CertificateRevocationList | None = None,
) -> VerifiedReport:
    """Verify `report` with its VCEK/VLEK (`chain`, optionally with ASK/ARK) at `now`.

    `product` is the expected product line; it is required in effect only for v2 reports whose
    certificate lacks a productName. Given ASK/ARK certificates are used only if they chain to
    the ARK in `roots`; otherwise the ones in `roots` are used. Raises MalformedEvidence or
    VerificationFailed with the reason code of the first failing check.
    """
    parsed = Report.from_bytes(report, product=product)
    given = _given_chain(chain)
    kind = given.kind
    resolved = _resolve_product(parsed, product, given.product_name)
    if parsed.cpuid is None and parsed.tcb_layout is not resolved.tcb_layout:
        parsed = Report.from_bytes(report, product=resolved)
    _check_signing_key(parsed, kind)

    product_roots = roots.require(resolved)
    trusted = _trusted_chains.get(product_roots, *chain)
    if trusted is None:
        trusted = _trust_chain(given, product_roots, product=resolved, roots_name=roots.name)
        _trusted_chains.put(trusted, product_roots, *chain)
    leaf, intermediate, ark = given.leaf, trusted.intermediate, product_roots.ark

    if not all(not_before <= now <= not_after for not_before, not_after in trusted.validity):
        for certificate, what in ((ark, "ARK"), (intermediate, "ASK/ASVK"), (leaf, kind.name)):
            certificates.check_validity(certificate, now, what=f"the {what}")

    if crl is not None:
        certificates.verify_crl(crl, ark, now, what="the AMD CRL")
        certificates.check_not_revoked(crl, intermediate, what="the ASK/ASVK")
        # Real VCEKs all have serial 0, so a CRL cannot name one of them; a certificate with a
        # proper serial number (as the emulated TEE issues) is checked too.
        if certificates.serial_number(leaf) != 0:
            certificates.check_not_revoked(crl, leaf, what=f"the {kind.name}")

    _check_chip_id(parsed, trusted.endorsement)
    _check_tcb(parsed, trusted.endorsement)
    _check_signature(report, parsed, leaf, kind)
    return VerifiedReport(parsed, trusted.endorsement, resolved)


# The two records below are this module's own memo values: named tuples, which are made in a
# third of the time of dataclasses, a millisecond each of `contrast evidence verify`'s start.
class _GivenChain(NamedTuple):
    """What the certificates given with a report say before anything is trusted."""

    leaf: x509.Certificate
    intermediates: list[x509.Certificate]
    arks: list[x509.Certificate]
    kind: SigningKey
    product_name: str | None


class _TrustedChain(NamedTuple):
    """A leaf found to chain to a product's ARK: through which intermediate, and its facts.

    `validity` holds the (not before, not after) of the ARK, the intermediate and the leaf:
    `cryptography` makes these datetimes anew on each reading (4 µs a report for the three).
    """

    intermediate: x509.Certificate
    endorsement: Endorsement
    validity: tuple[tuple[datetime, datetime], ...]


# Keyed by the certificate objects given (see contrast.attestation.memo): the loaders hand out
# one object per distinct certificate, so a known chip's chain is looked up, not re-read.
_given_chains: IdentityMemo[_GivenChain] = IdentityMemo(_CACHE_SIZE)
_trusted_chains: IdentityMemo[_TrustedChain] = IdentityMemo(_CACHE_SIZE)


def _given_chain(chain: Sequence[x509.Certificate]) -> _GivenChain:
    given = _given_chains.get(*chain)
    if given is None:
        leaf, intermediates, arks = _split_chain(chain)
        kind, product_name = _leaf_identity(leaf)
        given = _GivenChain(leaf, intermediates, arks, kind, product_name)
        _given_chains.put(given, *chain)
    return given


def _trust_chain(
    given: _GivenChain, product_roots: ProductRoots, *, product: Product, roots_name: str
) -> _TrustedChain:
    """Check the given chain against the product's roots (raises unless it holds)."""
    ark = product_roots.ark
    for given_ark in given.arks:
        if not certificates.same_certificate(given_ark, ark):
            raise VerificationFailed(
                Reason.UNTRUSTED_ROOT,
                f"the ARK given ({certificates.common_name(given_ark.subject)}) is not the"
                f" trusted {roots_name} ARK for {product.value}",
            )
    _self_signed(ark)
    pinned = product_roots.asvk if given.kind is SigningKey.VLEK else product_roots.ask
    intermediate = _chain_leaf(
        given.leaf,
        ark=ark,
        pinned=pinned,
        given=given.intermediates,
        kind=given.kind,
        product=product,
        roots_name=roots_name,
    )
    validity = tuple(
        (certificate.not_valid_before_utc, certificate.not_valid_after_utc)
        for certificate in (ark, intermediate, given.leaf)
    )
    return _TrustedChain(intermediate, _endorsement(given.leaf), validity)


def _split_chain(
    chain: Sequence[x509.Certificate],
) -> tuple[x509.Certificate, list[x509.Certificate], list[x509.Certificate]]:
    """The leaf (the one non-CA certificate), the intermediates and the self-issued roots."""
    leaves, intermediates, arks = [], [], []
    for certificate in chain:
        if not _is_ca(certificate):
            leaves.append(certificate)
        elif certificate.subject == certificate.issuer:
            arks.append(certificate)
        else:
            intermediates.append(certificate)
    if not leaves:
        raise VerificationFailed(
            Reason.CERTIFICATE_MISSING,
            "no VCEK or VLEK certificate was given with the report",
            hint="pass the VCEK (from the extended report or AMD's KDS) with --cert",
        )
    if len(leaves) > 1:
        raise MalformedEvidence(
            Reason.MALFORMED_CERTIFICATE,
            f"{len(leaves)} end-entity certificates were given; pass exactly one VCEK or VLEK",
        )
    return leaves[0], intermediates, arks


@lru_cache(maxsize=_CACHE_SIZE)
def _leaf_identity(leaf: x509.Certificate) -> tuple[SigningKey, str | None]:
    """VCEK or VLEK, and the productName as far as it can be read (before the chain is checked)."""
    return endorsements.certificate_kind(leaf), endorsements.product_name(leaf)


@lru_cache(maxsize=_CACHE_SIZE)
def _is_ca(certificate: x509.Certificate) -> bool:
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        return False
    except ValueError as error:
        raise MalformedEvidence(
            Reason.MALFORMED_CERTIFICATE, f"a certificate's extensions cannot be read: {error}"
        ) from None
    return constraints.value.ca


def _resolve_product(report: Report, configured: Product | None, name: str | None) -> Product:
    """One product from the report's CPUID, the configuration and the certificate, or refuse."""
    from_report = report.product
    if from_report is not None and configured is not None and from_report is not configured:
        raise VerificationFailed(
            Reason.PRODUCT_MISMATCH,
            f"the report comes from a {from_report.value} (CPUID) but {configured.value} is"
            " expected",
        )
    expected = from_report or configured
    from_certificate = Product.from_name(name) if name is not None else None
    if name is not None and (from_certificate is None or expected not in (None, from_certificate)):
        wanted = expected.value if expected is not None else "a known product"
        raise VerificationFailed(
            Reason.PRODUCT_MISMATCH,
            f"the certificate is for {name!r} but the report needs {wanted}",
        )
    resolved = expected or from_certificate
    if resolved is None:
        raise VerificationFailed(
            Reason.PRODUCT_MISMATCH,
            f"cannot tell which product produced this version {report.version} report",
            hint="pass the expected product (Milan, Genoa or Turin)",
        )
    return resolved


def _check_signing_key(report: Report, kind: SigningKey) -> None:
    if report.signing_key is SigningKey.NONE:
        raise VerificationFailed(
            Reason.BAD_REPORT_SIGNATURE,
            "the report is not signed (SIGNING_KEY = none)",
            hint="the platform masks its chip key; such reports cannot be attested",
        )
    if report.signing_key is not kind:
        raise VerificationFailed(
            Reason.SIGNING_KEY_MISMATCH,
            f"the report is signed by a {report.signing_key.name} but a {kind.name} was given",
        )


def _chain_leaf(
    leaf: x509.Certificate,
    *,
    ark: x509.Certificate,
    pinned: x509.Certificate | None,
    given: list[x509.Certificate],
    kind: SigningKey,
    product: Product,
    roots_name: str,
) -> x509.Certificate:
    """The intermediate (ASK for a VCEK, ASVK for a VLEK) that signed `leaf` and chains to ARK."""
    candidates = [c for c in (pinned, *given) if c is not None]
    issuer_name = "ASVK" if kind is SigningKey.VLEK else "ASK"
    for intermediate in candidates:
        try:
            _issued_by(intermediate, ark)
            _issued_by(leaf, intermediate)
        except VerificationFailed:
            continue
        return intermediate
    raise VerificationFailed(
        Reason.UNTRUSTED_VCEK,
        f"the {kind.name} is not signed by the trusted {roots_name} {issuer_name} for"
        f" {product.value}",
        hint="check that the certificate belongs to this report's product and platform",
    )


@lru_cache(maxsize=_CACHE_SIZE)
def _issued_by(certificate: x509.Certificate, issuer: x509.Certificate) -> None:
    """Raises unless `issuer` signed `certificate`; successes are cached (failures are not)."""
    certificates.verify_issued_by(
        certificate, issuer, reason=Reason.UNTRUSTED_VCEK, what="the certificate"
    )


@lru_cache(maxsize=_CACHE_SIZE)
def _self_signed(ark: x509.Certificate) -> None:
    certificates.verify_issued_by(ark, ark, reason=Reason.UNTRUSTED_ROOT, what="the ARK")


@lru_cache(maxsize=_CACHE_SIZE)
def _endorsement(leaf: x509.Certificate) -> Endorsement:
    return Endorsement.from_certificate(leaf)


def _check_chip_id(report: Report, endorsement: Endorsement) -> None:
    """A VCEK is bound to one chip: CHIP_ID (first 8 bytes on Turin) must equal its hwID.

    Skipped where there is nothing to compare: a VLEK (bound to a cloud provider), or a report
    whose chip id is masked (MASK_CHIP_KEY, or MASK_CHIP_ID zeroing the field).
    """
    hw_id = endorsement.hw_id
    chip_id = report.chip_id
    if hw_id is None or report.signer_info.mask_chip_key or not any(chip_id):
        return
    if chip_id[: len(hw_id)] != hw_id or any(chip_id[len(hw_id) :]):
        raise VerificationFailed(
            Reason.CHIP_ID_MISMATCH,
            f"the report's CHIP_ID {chip_id[:8].hex()}… is not the VCEK's hwID"
            f" {hw_id[:8].hex()}…: the certificate belongs to another chip",
            hint="fetch the VCEK for this chip and TCB from AMD's KDS",
        )


def _check_tcb(report: Report, endorsement: Endorsement) -> None:
    if report.reported_tcb != endorsement.tcb:
        raise VerificationFailed(
            Reason.TCB_MISMATCH,
            f"REPORTED_TCB ({report.reported_tcb}) differs from the certificate's TCB"
            f" ({endorsement.tcb})",
            hint="fetch the VCEK for the report's REPORTED_TCB from AMD's KDS",
        )


def _check_signature(data: bytes, report: Report, leaf: x509.Certificate, kind: SigningKey) -> None:
    if report.signature_algo != SIGNATURE_ALGO_ECDSA_P384_SHA384:
        raise VerificationFailed(
            Reason.BAD_REPORT_SIGNATURE,
            f"unsupported report signature algorithm {report.signature_algo}"
            " (only 1, ECDSA P-384 with SHA-384, is defined)",
        )
    public_key = leaf.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey) or not isinstance(
        public_key.curve, ec.SECP384R1
    ):
        raise VerificationFailed(
            Reason.BAD_REPORT_SIGNATURE, f"the {kind.name} key is not an EC P-384 key"
        )
    if not certificates.verify_ecdsa(
        public_key, report.signature_r, report.signature_s, data[:SIGNED_SIZE], hashes.SHA384()
    ):
        raise VerificationFailed(
            Reason.BAD_REPORT_SIGNATURE,
            f"the report signature does not verify with the {kind.name}: the report was altered"
            " or signed by another key",
        )
