"""Our SNP and TDX verifiers against Google's (go-sev-guest, go-tdx-guest), short form (issue 24).

Builds the Go driver in tools/differential (cached by its sources' hash under ~/.cache/contrast;
a missing Go or module proxy fails here with the build error), runs both sides on every real
vector and on a few thousand seeded mutations, and requires every disagreement to be one of the
deliberate differences the README lists. The long form is bench/differential.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.attestation import differential
from tests.attestation.differential import Summary, TdxPolicy, Verdict
from tests.conftest import require_shared

SHORT_MUTATIONS = 3000
SEED = 24


@pytest.fixture(scope="module")
def driver() -> Path:
    require_shared()
    return differential.driver_path()


def _explain(summary: Summary) -> str:
    return differential.report(summary, examples=3)


def test_every_real_vector_agrees_or_differs_as_documented(driver: Path) -> None:
    cases = differential.real_cases()
    assert len(cases) >= 35
    summary = differential.run(cases, driver)
    assert summary.inputs == len(cases)
    assert not summary.unknown, _explain(summary)
    assert not summary.crashes, _explain(summary)
    # Most authentic vectors are accepted by both under the shared policy; the debug ones and
    # the out-of-date TDX platforms are refused by both.
    assert summary.both_accept >= 14, _explain(summary)
    assert {d.known for d in summary.disagreements} == {
        "go-sev-guest knows no product for CPUID model A0h (Genoa family)",
        "go-tdx-guest compares the FMSPC case-sensitively",
    }, _explain(summary)


def test_mutations_agree_or_differ_as_documented(driver: Path) -> None:
    summary = differential.run(differential.mutated_cases(SHORT_MUTATIONS, SEED), driver)
    assert summary.inputs == SHORT_MUTATIONS
    assert not summary.unknown, _explain(summary)
    ours_crashed = [c for c in summary.crashes if c[1].reason.startswith("crash:")]
    assert not ours_crashed, _explain(summary)
    # The signature-keeping variations reach acceptance on both sides, so the comparison is not
    # only of refusals.
    assert summary.both_accept >= 100, _explain(summary)


def test_mutations_are_reproducible() -> None:
    first = [(c.id, c.detail, c.evidence) for c in differential.mutated_cases(200, SEED)]
    again = [(c.id, c.detail, c.evidence) for c in differential.mutated_cases(200, SEED)]
    assert first == again
    other = [(c.id, c.detail, c.evidence) for c in differential.mutated_cases(200, SEED + 1)]
    assert first != other


def test_an_unlisted_disagreement_is_a_finding() -> None:
    """A disagreement outside KNOWN_DIFFERENCES is reported as one, not absorbed."""
    base = next(c for c in differential.real_cases() if c.id == "snp/oak-milan-v3-rk-release")
    summary = Summary()
    differential._tally(summary, base, Verdict(False, "tcb_too_low: invented"), Verdict(True, ""))
    assert [d.known for d in summary.disagreements] == [None]
    assert "NOT KNOWN" in differential.report(summary)


def test_the_driver_is_offline(driver: Path) -> None:
    """A TDX case whose collateral lacks the QE identity is refused by go-tdx-guest's fetch
    through our getter, which has no network behind it; with it, the same case passes."""
    debug = next(c for c in differential.real_cases() if c.id == "tdx/trustee-quote4-v4-debug")
    assert isinstance(debug.policy, TdxPolicy)
    assert debug.collateral is not None
    base = replace(debug, policy=replace(debug.policy, allow_debug=True))
    collateral = {k: v for k, v in base.collateral.items() if k != "qe_identity"}
    case = replace(base, id="no-qe-identity", collateral=collateral)
    summary = differential.run([base, case], driver, keep=True)
    (_, _, google_base), (_, _, google) = summary.results
    assert google_base.ok, google_base.reason
    assert not google.ok
    assert "offline: the input has no document for https://api.trustedservices.intel.com" in (
        google.reason
    )
