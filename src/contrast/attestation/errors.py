"""Errors of the attestation package.

Every rejection carries a `Reason`: a short, stable code a program can act on (the codes of the
shared conformance vectors are among them), next to a message for people.
"""

from __future__ import annotations

from enum import StrEnum

from contrast.errors import ContrastError


class Reason(StrEnum):
    """Why evidence was refused."""

    # Malformed input.
    MALFORMED_REPORT_LENGTH = "malformed_report_length"
    MALFORMED_REPORT = "malformed_report"
    MALFORMED_QUOTE = "malformed_quote"
    MALFORMED_CERTIFICATE = "malformed_certificate"
    MALFORMED_CERT_TABLE = "malformed_cert_table"
    MALFORMED_COLLATERAL = "malformed_collateral"
    # Authenticity: SEV-SNP.
    BAD_REPORT_SIGNATURE = "bad_report_signature"
    UNTRUSTED_VCEK = "untrusted_vcek"
    UNTRUSTED_ROOT = "untrusted_root"
    PRODUCT_MISMATCH = "product_mismatch"
    SIGNING_KEY_MISMATCH = "signing_key_mismatch"
    TCB_MISMATCH = "tcb_mismatch"
    CHIP_ID_MISMATCH = "chip_id_mismatch"
    CERTIFICATE_MISSING = "certificate_missing"
    CERTIFICATE_NOT_YET_VALID = "certificate_not_yet_valid"
    CERTIFICATE_EXPIRED = "certificate_expired"
    CERTIFICATE_REVOKED = "certificate_revoked"
    BAD_CRL = "bad_crl"
    # Authenticity: TDX.
    BAD_QUOTE_SIGNATURE = "bad_quote_signature"
    BAD_QE_REPORT_SIGNATURE = "bad_qe_report_signature"
    QE_REPORT_DATA_MISMATCH = "qe_report_data_mismatch"
    UNTRUSTED_PCK = "untrusted_pck"
    UNSUPPORTED_QUOTE = "unsupported_quote"
    # Collateral (TDX).
    BAD_TCB_INFO_SIGNATURE = "bad_tcb_info_signature"
    BAD_QE_IDENTITY_SIGNATURE = "bad_qe_identity_signature"
    TCB_INFO_EXPIRED = "tcb_info_expired"
    TCB_INFO_NOT_YET_VALID = "tcb_info_not_yet_valid"
    QE_IDENTITY_EXPIRED = "qe_identity_expired"
    QE_IDENTITY_NOT_YET_VALID = "qe_identity_not_yet_valid"
    PCK_CRL_EXPIRED = "pck_crl_expired"
    ROOT_CA_CRL_EXPIRED = "root_ca_crl_expired"
    FMSPC_MISMATCH = "fmspc_mismatch"
    PCE_ID_MISMATCH = "pce_id_mismatch"
    TDX_MODULE_MISMATCH = "tdx_module_mismatch"
    QE_IDENTITY_MISMATCH = "qe_identity_mismatch"
    # Reference values (policy), either platform.
    REFERENCE_MISMATCH = "reference_mismatch"
    DEBUG_NOT_ALLOWED = "debug_not_allowed"
    TCB_TOO_LOW = "tcb_too_low"
    TCB_STATUS_NOT_ACCEPTED = "tcb_status_not_accepted"
    EMULATED_EVIDENCE = "emulated_evidence"
    # Getting evidence or endorsements.
    NO_TEE = "no_tee"
    ISSUER_FAILED = "issuer_failed"
    FETCH_FAILED = "fetch_failed"


class AttestationPackageError(ContrastError):
    """The root of the attestation package's errors.

    Under it: `AttestationError`, evidence refused or not obtained, with the `Reason` a program
    acts on; and the errors of computing what evidence is compared with (a launch digest, TDX
    measurements, an event log, reference values), which have no verification reason. Callers
    that refuse evidence catch `AttestationError`; this root is for those that catch it all.
    """


class AttestationError(AttestationPackageError):
    """Evidence could not be parsed, obtained or accepted."""

    def __init__(self, reason: Reason, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


class MalformedEvidence(AttestationError):
    """The bytes are not evidence of the expected format (wrong length, lengths that overrun)."""


class VerificationFailed(AttestationError):
    """Well-formed evidence that is not authentic, or not valid at the given time."""


class ReferenceMismatch(VerificationFailed):
    """Authentic evidence whose claims differ from the reference values.

    Names the field with its expected and actual value, so an operator can tell a stale reference
    value from an attack.
    """

    def __init__(
        self,
        field: str,
        expected: str,
        actual: str,
        *,
        reason: Reason = Reason.REFERENCE_MISMATCH,
        hint: str | None = None,
    ) -> None:
        super().__init__(reason, f"{field}: expected {expected}, got {actual}", hint=hint)
        self.field = field
        self.expected = expected
        self.actual = actual


class EvidenceUnavailable(AttestationError):
    """No evidence or endorsement could be obtained (no TEE device, KDS unreachable, ...)."""
