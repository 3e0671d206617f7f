"""Errors of the manifest package: its root, and the manifest that cannot be used.

`ManifestError` is a manifest that cannot be read or is not valid; callers that reject a
manifest catch it. `ManifestReferenceMismatch` is evidence the manifest's verifier refuses: an
attestation refusal (callers that refuse evidence catch `AttestationError` and read its
`Reason`), raised by this package, so it is under both roots and not a `ManifestError`, which
would tell a caller that the manifest itself was bad.
"""

from __future__ import annotations

from contrast.attestation.errors import ReferenceMismatch
from contrast.errors import ContrastError


class ManifestPackageError(ContrastError):
    """The root of the manifest package's errors."""


class ManifestError(ManifestPackageError):
    """A manifest that cannot be read or is not valid; the message names the field."""


class ManifestReferenceMismatch(ManifestPackageError, ReferenceMismatch):
    """Authentic evidence that does not meet what the manifest's verifier expects of it: its
    platform has no entry, a policy hash not allowed, report data for another key or nonce, a
    TDX MrConfigId beyond the policy hash not zero. `Reason.REFERENCE_MISMATCH`, as any other."""
