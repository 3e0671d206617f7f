"""X.509 helpers shared by the SNP and TDX verifiers.

Thin wrappers over `cryptography` that turn its exceptions into `AttestationError`s with reason
codes, and that take "now" as a parameter: validity is never checked against the wall clock here.

`cryptography` parses most fields of a certificate or CRL only when they are first read, so a
certificate that loads can still raise `DuplicateExtension`, `InvalidVersion` or `ValueError`
later, deep inside a verifier. The loaders here read every field once, so whatever they return
is fully parsed and malformed input is refused where it enters, as `MalformedEvidence`.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.utils import CryptographyDeprecationWarning

from contrast.attestation.errors import MalformedEvidence, Reason, VerificationFailed

_PEM_MARKER = b"-----BEGIN CERTIFICATE-----"
# Parsed certificates kept by their bytes: a cluster's VCEKs, ASKs, ARKs and PCK chains.
CERTIFICATE_CACHE_SIZE = 256
# What `cryptography` raises for malformed contents, at load or when a field is first read
# (and the warnings it gives for out-of-range values, made errors by `_parsing`).
_PARSE_ERRORS = (
    ValueError,
    TypeError,
    UnsupportedAlgorithm,
    x509.DuplicateExtension,
    x509.InvalidVersion,
    x509.UnsupportedGeneralNameType,
    UserWarning,
)


@contextmanager
def _parsing() -> Iterator[None]:
    """Warnings about malformed values (a 3-letter country) are errors; AMD's serial 0 is not.

    AMD issues VCEKs and VLEKs with serial number 0, which RFC 5280 forbids and `cryptography`
    loads with a deprecation warning; those certificates are what real hardware presents.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        yield


def load_certificates(data: bytes, *, what: str = "certificate") -> list[x509.Certificate]:
    """Load one DER certificate or any number of PEM certificates, every field parsed.

    Trailing NUL bytes (as in TDX quotes) are ignored. The same VCEK arrives with every pod's
    evidence, so what was parsed is kept by its bytes (every byte the parse read; `what` only
    names it in errors, which are never kept): parsing it again cost a third of a verification.
    """
    try:
        return list(_load_certificates(data))
    except _Unparsable as problem:
        raise MalformedEvidence(Reason.MALFORMED_CERTIFICATE, f"{what} {problem}") from None


class _Unparsable(Exception):
    """Why bytes are no certificate; the caller says which bytes they were."""


@functools.lru_cache(maxsize=CERTIFICATE_CACHE_SIZE)
def _load_certificates(data: bytes) -> tuple[x509.Certificate, ...]:
    with _parsing():
        try:
            if _PEM_MARKER in data:
                certificates = x509.load_pem_x509_certificates(data.rstrip(b"\0"))
            else:
                certificates = [x509.load_der_x509_certificate(data)]
        except _PARSE_ERRORS as error:
            raise _Unparsable(f"is neither a DER nor a PEM X.509 certificate: {error}") from None
        for certificate in certificates:
            try:
                _read_every_field(certificate)
            except _PARSE_ERRORS as error:
                raise _Unparsable(
                    f"is a malformed X.509 certificate: {type(error).__name__}: {error}"
                ) from None
            unused = signature_unused_bits(certificate.public_bytes(Encoding.DER))
            if unused:
                raise _Unparsable(f"has a signature of {unused} bits short of whole bytes")
    return tuple(certificates)


def _read_every_field(certificate: x509.Certificate) -> None:
    """Make `cryptography` parse each field now (see the module docstring)."""
    _ = (
        certificate.version,
        certificate.serial_number,
        certificate.issuer,
        certificate.subject,
        certificate.not_valid_before_utc,
        certificate.not_valid_after_utc,
        certificate.signature_algorithm_oid,
        certificate.extensions,
        certificate.public_key(),
    )


def load_certificate(data: bytes, *, what: str = "certificate") -> x509.Certificate:
    """Load exactly one certificate (DER or PEM)."""
    certificates = load_certificates(data, what=what)
    if len(certificates) != 1:
        raise MalformedEvidence(
            Reason.MALFORMED_CERTIFICATE,
            f"{what}: expected one certificate, found {len(certificates)}",
        )
    return certificates[0]


def serial_number(certificate: x509.Certificate) -> int:
    """The serial number, without the warning `cryptography` gives for AMD's serial 0."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        return certificate.serial_number


def common_name(name: x509.Name) -> str:
    """The subject or issuer CN, or an empty string when there is none."""
    attributes = name.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    value = attributes[0].value if attributes else ""
    return value if isinstance(value, str) else value.decode(errors="replace")


def check_validity(certificate: x509.Certificate, now: datetime, *, what: str) -> None:
    """Refuse a certificate outside its validity period at `now` (timezone-aware)."""
    if now < certificate.not_valid_before_utc:
        raise VerificationFailed(
            Reason.CERTIFICATE_NOT_YET_VALID,
            f"{what} is not valid before {certificate.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ}"
            f" (checked at {now:%Y-%m-%dT%H:%M:%SZ})",
            hint="check the system clock or the --at time",
        )
    if now > certificate.not_valid_after_utc:
        raise VerificationFailed(
            Reason.CERTIFICATE_EXPIRED,
            f"{what} expired at {certificate.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
            f" (checked at {now:%Y-%m-%dT%H:%M:%SZ})",
        )


def verify_issued_by(
    certificate: x509.Certificate,
    issuer: x509.Certificate,
    *,
    reason: Reason,
    what: str,
) -> None:
    """Check that `issuer` signed `certificate` (RSA-PSS, RSA PKCS#1 or ECDSA) and names match."""
    try:
        certificate.verify_directly_issued_by(issuer)
    except (InvalidSignature, ValueError, TypeError, UnsupportedAlgorithm) as error:
        detail = str(error) or "the signature does not verify"
        raise VerificationFailed(
            reason,
            f"{what} is not signed by {common_name(issuer.subject) or 'the expected issuer'}:"
            f" {detail}",
        ) from None


def same_certificate(a: x509.Certificate, b: x509.Certificate) -> bool:
    """Byte-wise equality of two certificates (DER)."""
    return a.fingerprint(hashes.SHA256()) == b.fingerprint(hashes.SHA256())


def verify_crl(
    crl: x509.CertificateRevocationList,
    issuer: x509.Certificate,
    now: datetime,
    *,
    what: str,
    expired_reason: Reason = Reason.BAD_CRL,
) -> None:
    """Check a CRL's signature by `issuer` and that it is current at `now`."""
    if crl.issuer != issuer.subject or not crl.is_signature_valid(issuer.public_key()):  # type: ignore[arg-type]
        raise VerificationFailed(
            Reason.BAD_CRL, f"{what} is not signed by {common_name(issuer.subject)}"
        )
    next_update = crl.next_update_utc
    if now < crl.last_update_utc:
        raise VerificationFailed(
            Reason.BAD_CRL, f"{what} is not valid before {crl.last_update_utc:%Y-%m-%dT%H:%M:%SZ}"
        )
    if next_update is not None and now > next_update:
        raise VerificationFailed(
            expired_reason, f"{what} expired at {next_update:%Y-%m-%dT%H:%M:%SZ}"
        )


def check_not_revoked(
    crl: x509.CertificateRevocationList, certificate: x509.Certificate, *, what: str
) -> None:
    """Refuse a certificate whose serial number the (already verified) CRL lists."""
    serial = serial_number(certificate)
    if crl.get_revoked_certificate_by_serial_number(serial) is not None:
        raise VerificationFailed(
            Reason.CERTIFICATE_REVOKED,
            f"{what} (serial {serial:#x}) is revoked by {common_name(crl.issuer)}",
        )


def load_crl(data: bytes, *, what: str) -> x509.CertificateRevocationList:
    """Load a DER or PEM CRL, every field of it and of its entries parsed."""
    try:
        with _parsing():
            if data.lstrip().startswith(b"-----BEGIN"):
                crl = x509.load_pem_x509_crl(data)
            else:
                crl = x509.load_der_x509_crl(data)
            _read_every_crl_field(crl)
    except _PARSE_ERRORS as error:
        raise MalformedEvidence(
            Reason.MALFORMED_COLLATERAL, f"{what} is not a DER or PEM CRL: {error}"
        ) from None
    unused = signature_unused_bits(crl.public_bytes(Encoding.DER))
    if unused:
        raise MalformedEvidence(
            Reason.MALFORMED_COLLATERAL,
            f"{what} has a signature of {unused} bits short of whole bytes",
        )
    return crl


def _read_every_crl_field(crl: x509.CertificateRevocationList) -> None:
    _ = (
        crl.issuer,
        crl.last_update_utc,
        crl.next_update_utc,
        crl.signature_algorithm_oid,
        crl.extensions,
    )
    for entry in crl:
        _ = (entry.serial_number, entry.revocation_date_utc, entry.extensions)


# ECDSA with each hash, made once: it holds nothing but the hash, and making it took 1.5 µs of
# every report's verification.
_ECDSA_BY_HASH: dict[str, ec.ECDSA] = {}


def verify_ecdsa(
    public_key: ec.EllipticCurvePublicKey,
    r: int,
    s: int,
    data: bytes,
    algorithm: hashes.HashAlgorithm,
) -> bool:
    """ECDSA verification from raw (r, s) integers, as AMD and Intel encode signatures."""
    signature_algorithm = _ECDSA_BY_HASH.get(algorithm.name)
    if signature_algorithm is None:
        signature_algorithm = _ECDSA_BY_HASH[algorithm.name] = ec.ECDSA(algorithm)
    try:
        public_key.verify(encode_dss_signature(r, s), data, signature_algorithm)
    except InvalidSignature:
        return False
    return True


def parse_time(text: str) -> datetime:
    """An ISO 8601 instant; a naive time is taken as UTC."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def certificate_chain_names(certificates: Sequence[x509.Certificate]) -> str:
    """`leaf ← intermediate ← root` by CN, for messages."""
    return " ← ".join(common_name(c.subject) for c in certificates)


_CONTEXT_0 = 0xA0
_SEQUENCE = 0x30
_BIT_STRING = 0x03


def signature_unused_bits(der: bytes) -> int:
    """The unused-bits count of a parsed certificate's or CRL's signature BIT STRING.

    `cryptography` verifies the signature's bytes as they are, padding bits included, so a
    certificate whose signature BIT STRING claims unused bits (a different value, one bit
    shorter) still verified here while OpenSSL and Go refuse it (issue 24's differential run:
    go-sev-guest refused a VCEK with this one byte changed). The structure was parsed already,
    so this walks it without checks beyond staying inside `der`.
    """

    def element(position: int) -> tuple[int, int]:
        """(content start, end) of the DER element at `position`."""
        length = der[position + 1]
        position += 2
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(der[position : position + count], "big")
            position += count
        return position, position + length

    try:
        inside, _ = element(0)  # Certificate / CertificateList
        _, after = element(inside)  # TBSCertificate / TBSCertList
        _, after = element(after)  # signatureAlgorithm
        if der[after] != _BIT_STRING:
            return 0
        start, _ = element(after)
        return der[start]
    except IndexError:
        return 0


def _first_tag_inside_tbs(data: bytes) -> int | None:
    """The tag that opens the first element of the first element of a DER SEQUENCE, if any.

    A certificate's TBSCertificate opens with its `[0]` version (v3, all that is issued today);
    a CRL's TBSCertList with an INTEGER version or its AlgorithmIdentifier SEQUENCE. Telling
    them apart from these few header bytes spares a VCEK the trial parse as a CRL.
    """
    position = 0
    for _ in range(2):
        if len(data) < position + 2 or data[position] != _SEQUENCE:
            return None
        length = data[position + 1]
        position += 2
        if length & 0x80:
            position += length & 0x7F
    return data[position] if position < len(data) else None


def split_endorsements(
    files: Sequence[bytes], *, what: str
) -> tuple[list[x509.Certificate], x509.CertificateRevocationList | None]:
    """Certificates (DER or PEM, any number per file) and at most one CRL, told apart by content.

    Evidence carries its endorsements as a flat list of files (VCEK, ASK, ARK, the AMD CRL), so
    each file is looked at: PEM by its armour, DER by trying the CRL parser.
    """
    chain: list[x509.Certificate] = []
    crl = None
    for data in files:
        if _looks_like_crl(data):
            crl = load_crl(data, what=f"{what} (CRL)")
        else:
            chain.extend(load_certificates(data, what=what))
    return chain, crl


def _looks_like_crl(data: bytes) -> bool:
    if b"-----BEGIN X509 CRL-----" in data:
        return True
    if b"-----BEGIN" in data:
        return False
    if _first_tag_inside_tbs(data) == _CONTEXT_0:  # a v3 certificate's [0] version: no CRL
        return False
    try:
        load_crl(data, what="CRL")
    except MalformedEvidence:
        return False
    return True
