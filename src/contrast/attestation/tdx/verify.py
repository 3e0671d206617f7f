"""Is this TDX quote authentic, and (with collateral) how current is the platform's TCB?

The checks, in the order that gives each conformance vector its stated reason
(research/attestation.md §4.6):

1. the quote parses by its declared lengths (`malformed_quote`), is v4/v5 TDX with a P-256
   attestation key and QE report certification data (`unsupported_quote`);
2. the PCK chain in the quote ends in the trusted root and each link is signed by the next
   (`untrusted_pck`) and valid at `now` (`certificate_*`);
3. the PCK signed the QE report (`bad_qe_report_signature`);
4. the QE report binds the attestation key: REPORTDATA = SHA-256(key ‖ QE auth data) ‖ 32 zero
   bytes (`qe_report_data_mismatch`);
5. the attestation key signed header ‖ body (`bad_quote_signature`);
6. with collateral, the collateral checks of `tdx.collateral` and the TCB status of
   `tdx.tcbstatus`.

A verified PCK chain is remembered (keyed by its exact bytes and the root) for as long as every
certificate in it stays valid, and so is the attestation key the QE report certified under that
chain (keyed by the exact certification data): the quoting enclave reuses one attestation key
for many quotes, so in steady state a quote costs one P-256 verification, its own signature.
Every check still runs in full the first time any of these bytes is seen.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.attestation.certificates import (
    check_validity,
    load_certificates,
    same_certificate,
    verify_ecdsa,
    verify_issued_by,
)
from contrast.attestation.errors import MalformedEvidence, Reason, VerificationFailed
from contrast.attestation.tdx.collateral import Collateral, check_collateral
from contrast.attestation.tdx.pck import PckExtension, read_pck_extension
from contrast.attestation.tdx.quote import (
    ATTESTATION_KEY_TYPE_ECDSA_P256,
    CERT_TYPE_PCK_CHAIN,
    CERT_TYPE_QE_REPORT,
    Quote,
    QuoteSignatureData,
)
from contrast.attestation.tdx.tcbstatus import TcbEvaluation
from contrast.attestation.tdx.trust import IntelRootStore

_CACHE_SIZE = 256
_SCALAR_SIZE = 32


@dataclass(frozen=True)
class PckChain:
    """A PCK chain that verified up to the root, with what later checks need from it."""

    leaf: x509.Certificate
    intermediate: x509.Certificate
    root: x509.Certificate
    public_key: ec.EllipticCurvePublicKey
    extension: PckExtension
    # The trusted root's fingerprint ‖ SHA-256 of the chain's PEM bytes: names this chain.
    fingerprint: bytes

    @property
    def certificates(self) -> tuple[x509.Certificate, ...]:
        return (self.leaf, self.intermediate, self.root)


@dataclass(frozen=True)
class VerifiedQuote:
    """An authentic quote, the chain that vouched for it and, with collateral, its TCB status."""

    quote: Quote
    pck: PckChain
    tcb: TcbEvaluation | None = None
    # False when the quote chains to the emulated TEE's root rather than Intel's.
    genuine: bool = True

    @property
    def fmspc(self) -> bytes:
        return self.pck.extension.fmspc

    def claims(self) -> dict[str, Any]:
        body = self.quote.body
        return {
            "version": self.quote.header.version,
            "mr_td": body.mr_td.hex(),
            "rtmrs": [rtmr.hex() for rtmr in body.rtmrs],
            "mr_seam": body.mr_seam.hex(),
            "report_data": body.report_data.hex(),
            "td_attributes": body.td_attributes.hex(),
            "xfam": body.xfam.hex(),
            "mr_config_id": body.mr_config_id.hex(),
            "fmspc": self.fmspc.hex(),
            "tcb_status": None if self.tcb is None else str(self.tcb.status),
        }


def verify_quote_bytes(
    quote: bytes,
    *,
    now: datetime,
    roots: IntelRootStore,
    collateral: Collateral | None = None,
) -> VerifiedQuote:
    """Parse and verify a quote as the TDX guest produced it (trailing bytes allowed)."""
    return verify_quote(Quote.from_bytes(quote), now=now, roots=roots, collateral=collateral)


def verify_quote(
    quote: Quote,
    *,
    now: datetime,
    roots: IntelRootStore,
    collateral: Collateral | None = None,
) -> VerifiedQuote:
    """Verify a parsed quote; see the module docstring for the checks and their reasons."""
    signature_data = quote.signature_data
    qe = signature_data.qe_certification
    _check_supported(quote)
    assert qe is not None  # _check_supported refuses quotes without a QE report
    chain_pem = signature_data.pck_chain_pem
    assert chain_pem is not None
    chain = verify_pck_chain(chain_pem, now=now, roots=roots)
    attestation_key = _certified_attestation_key(chain, signature_data)
    if not _verify_raw(attestation_key, signature_data.signature, quote.signed_bytes):
        raise VerificationFailed(
            Reason.BAD_QUOTE_SIGNATURE,
            "the quote (header and TD report) is not signed by its attestation key",
        )
    tcb = None
    if collateral is not None:
        tcb = check_collateral(
            collateral,
            quote=quote,
            pck_leaf=chain.leaf,
            pck_intermediate=chain.intermediate,
            pck=chain.extension,
            now=now,
            roots=roots,
        )
    return VerifiedQuote(quote, chain, tcb, genuine=roots.genuine)


def _check_supported(quote: Quote) -> None:
    key_type = quote.header.attestation_key_type
    if key_type != ATTESTATION_KEY_TYPE_ECDSA_P256:
        raise MalformedEvidence(
            Reason.UNSUPPORTED_QUOTE,
            f"attestation key type {key_type} is not supported (2 = ECDSA P-256 is)",
        )
    certification = quote.signature_data.certification
    if certification.type != CERT_TYPE_QE_REPORT:
        raise MalformedEvidence(
            Reason.UNSUPPORTED_QUOTE,
            f"certification data type {certification.type} carries no QE report; only type"
            f" {CERT_TYPE_QE_REPORT} (QE report certification data) can be verified",
        )
    qe = quote.signature_data.qe_certification
    assert qe is not None
    if qe.certification.type != CERT_TYPE_PCK_CHAIN:
        raise MalformedEvidence(
            Reason.UNSUPPORTED_QUOTE,
            f"the QE report's certification data is type {qe.certification.type}; only type"
            f" {CERT_TYPE_PCK_CHAIN} (the PEM PCK chain) is supported",
            hint="configure the quote provider to embed the PCK certificate chain",
        )


def _certified_attestation_key(
    chain: PckChain, signature_data: QuoteSignatureData
) -> ec.EllipticCurvePublicKey:
    """The attestation key, once the PCK-signed QE report vouches for it.

    The quoting enclave certifies one attestation key for many quotes, so the outcome for the
    exact same PCK, QE certification data and key is remembered: a steady stream of quotes from
    one platform then costs one signature check each (the quote's).
    """
    qe = signature_data.qe_certification
    assert qe is not None
    memo_key = hashlib.sha256(
        chain.fingerprint + signature_data.certification.data + signature_data.attestation_key
    ).digest()
    with _cache_lock:
        key = _attestation_keys.get(memo_key)
        if key is not None:
            _attestation_keys.move_to_end(memo_key)
            return key
    if not _verify_raw(chain.public_key, qe.qe_report_signature, qe.qe_report.to_bytes()):
        raise VerificationFailed(
            Reason.BAD_QE_REPORT_SIGNATURE,
            "the QE report is not signed by the PCK certificate's key",
        )
    expected = hashlib.sha256(signature_data.attestation_key + qe.qe_auth_data).digest()
    if qe.qe_report.report_data != expected + bytes(32):
        raise VerificationFailed(
            Reason.QE_REPORT_DATA_MISMATCH,
            "the QE report does not vouch for this attestation key and QE authentication data"
            " (REPORTDATA ≠ SHA-256(key ‖ auth data) ‖ zeros)",
        )
    try:
        key = ec.EllipticCurvePublicKey.from_encoded_point(
            ec.SECP256R1(), b"\x04" + signature_data.attestation_key
        )
    except ValueError:
        raise VerificationFailed(
            Reason.BAD_QUOTE_SIGNATURE, "the attestation key is not a point on P-256"
        ) from None
    with _cache_lock:
        _attestation_keys[memo_key] = key
        while len(_attestation_keys) > _CACHE_SIZE:
            _attestation_keys.popitem(last=False)
    return key


def _verify_raw(key: ec.EllipticCurvePublicKey, signature: bytes, data: bytes) -> bool:
    """A 64-byte big-endian r‖s P-256/SHA-256 signature, as Intel encodes them."""
    r = int.from_bytes(signature[:_SCALAR_SIZE], "big")
    s = int.from_bytes(signature[_SCALAR_SIZE:], "big")
    if r <= 0 or s <= 0:
        return False
    return verify_ecdsa(key, r, s, data, hashes.SHA256())


# PCK chain verification, cached.


@dataclass(frozen=True)
class _CachedChain:
    chain: PckChain
    valid_from: datetime
    valid_until: datetime


_chain_cache: OrderedDict[tuple[bytes, bytes], _CachedChain] = OrderedDict()
_attestation_keys: OrderedDict[bytes, ec.EllipticCurvePublicKey] = OrderedDict()
_cache_lock = threading.Lock()


def verify_pck_chain(chain_pem: bytes, *, now: datetime, roots: IntelRootStore) -> PckChain:
    """PCK ← PCK Platform/Processor CA ← the trusted root, each valid at `now`."""
    key = (roots.root_fingerprint, hashlib.sha256(chain_pem).digest())
    with _cache_lock:
        cached = _chain_cache.get(key)
        if cached is not None:
            _chain_cache.move_to_end(key)
    if cached is not None and cached.valid_from <= now <= cached.valid_until:
        return cached.chain
    chain = _verify_pck_chain(chain_pem, now=now, roots=roots, fingerprint=b"".join(key))
    entry = _CachedChain(
        chain,
        max(c.not_valid_before_utc for c in chain.certificates),
        min(c.not_valid_after_utc for c in chain.certificates),
    )
    with _cache_lock:
        _chain_cache[key] = entry
        while len(_chain_cache) > _CACHE_SIZE:
            _chain_cache.popitem(last=False)
    return chain


def _verify_pck_chain(
    chain_pem: bytes, *, now: datetime, roots: IntelRootStore, fingerprint: bytes
) -> PckChain:
    certificates = load_certificates(chain_pem, what="PCK certificate chain in the quote")
    if len(certificates) == 2:
        certificates.append(roots.root)
    if len(certificates) != 3:
        raise VerificationFailed(
            Reason.UNTRUSTED_PCK,
            f"the PCK chain in the quote has {len(certificates)} certificates;"
            " expected PCK, PCK CA and root",
        )
    leaf, intermediate, root = certificates
    if not same_certificate(root, roots.root):
        raise VerificationFailed(
            Reason.UNTRUSTED_PCK,
            "the PCK chain does not end in the trusted "
            + ("Intel SGX Root CA" if roots.genuine else "(emulated) root CA"),
            hint=(
                "this quote may come from the emulated TEE; verify it with its roots"
                if roots.genuine
                else "this quote was not produced by this emulated TEE"
            ),
        )
    verify_issued_by(intermediate, root, reason=Reason.UNTRUSTED_PCK, what="the PCK CA")
    verify_issued_by(leaf, intermediate, reason=Reason.UNTRUSTED_PCK, what="the PCK certificate")
    for certificate, what in (
        (root, "the root CA"),
        (intermediate, "the PCK CA"),
        (leaf, "the PCK"),
    ):
        check_validity(certificate, now, what=what)
    public_key = leaf.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey) or not isinstance(
        public_key.curve, ec.SECP256R1
    ):
        raise VerificationFailed(Reason.UNTRUSTED_PCK, "the PCK key is not a P-256 key")
    return PckChain(leaf, intermediate, root, public_key, read_pck_extension(leaf), fingerprint)
