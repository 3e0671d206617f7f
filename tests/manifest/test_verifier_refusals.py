"""The manifest verifier's own refusals: attestation refusals (what callers catch, with their
Reason), raised as the manifest package's ManifestReferenceMismatch, never a ManifestError."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contrast.attestation.errors import AttestationError, Reason, ReferenceMismatch
from contrast.attestation.evidence import Evidence, Tee
from contrast.manifest.errors import ManifestError, ManifestPackageError, ManifestReferenceMismatch
from contrast.manifest.verifier import ManifestVerifier

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("tee", "message"),
    [
        (Tee.SNP, "platform: expected TDX (the manifest has no SNP entries), got SNP"),
        (Tee.TDX, "platform: expected SNP (the manifest has no TDX entries), got TDX"),
    ],
)
def test_evidence_of_a_platform_without_entries_is_a_reference_mismatch(
    tee: Tee, message: str
) -> None:
    with pytest.raises(AttestationError) as refused:
        ManifestVerifier([], []).verify(Evidence(tee, b"report"), report_data=bytes(64), now=NOW)
    error = refused.value
    assert str(error) == message
    assert error.reason is Reason.REFERENCE_MISMATCH
    assert isinstance(error, ManifestReferenceMismatch)
    assert isinstance(error, ReferenceMismatch)
    assert isinstance(error, ManifestPackageError)
    assert not isinstance(error, ManifestError)  # the manifest itself is fine
