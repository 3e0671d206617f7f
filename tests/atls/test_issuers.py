"""Options an evidence issuer refuses: aTLS's own InvalidIssuerOptions, before any evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from contrast.atls.errors import AtlsError, InvalidIssuerOptions
from contrast.atls.issuers import TeeKind, make_issuer


@pytest.mark.parametrize(
    ("kind", "state_dir", "policy_hash", "message"),
    [
        (TeeKind.EMULATED, None, bytes(32), "--tee emulated takes evidence from the pod's TEE"),
        (TeeKind.EMULATED, Path("/nonexistent"), None, "the node fixes the policy hash"),
        (TeeKind.EMULATED_SNP, None, bytes(32), "needs its state directory and the workload's"),
        (TeeKind.EMULATED_TDX, Path("/nonexistent"), None, "needs its state directory"),
        (TeeKind.EMULATED_SNP, Path("/nonexistent"), bytes(31), "is 32 bytes, got 31"),
    ],
)
def test_options_that_do_not_fit_the_kind_are_refused(
    kind: TeeKind, state_dir: Path | None, policy_hash: bytes | None, message: str
) -> None:
    with pytest.raises(InvalidIssuerOptions, match=message) as refused:
        make_issuer(kind, state_dir=state_dir, policy_hash=policy_hash)
    assert isinstance(refused.value, AtlsError)
