"""Evidence off the wire: a platform name that is no TEE is malformed evidence, not a crash."""

from __future__ import annotations

import pytest

from contrast.api import evidence_pb2
from contrast.api.convert import evidence_from_proto, evidence_to_proto
from contrast.attestation.errors import AttestationError, MalformedEvidence, Reason
from contrast.attestation.evidence import Evidence, Tee


def test_evidence_round_trips() -> None:
    evidence = Evidence(Tee.TDX, b"quote", (b"collateral",))
    assert evidence_from_proto(evidence_to_proto(evidence)) == evidence


def test_an_unknown_platform_is_malformed_evidence() -> None:
    """Callers (the Coordinator's mesh API, aTLS, peer recovery) refuse it as AttestationError."""
    message = evidence_pb2.Evidence(Platform="sgx" * 30, Report=b"report")
    with pytest.raises(MalformedEvidence) as raised:
        evidence_from_proto(message)
    assert isinstance(raised.value, AttestationError)
    assert raised.value.reason is Reason.MALFORMED_REPORT
    # The peer's name is cut to 40 characters in the message.
    assert str(raised.value) == f"unknown evidence platform {('sgx' * 30)[:40]!r}"
