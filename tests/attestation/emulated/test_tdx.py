"""The emulated TDX: real-format quotes that verify with its roots and only with its roots."""

from __future__ import annotations

import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contrast.attestation.emulated.tdx import DEFAULT_MR_TD, FMSPC, EmulatedTdx
from contrast.attestation.errors import AttestationError, Reason, ReferenceMismatch
from contrast.attestation.tdx.quote import Quote
from contrast.attestation.tdx.reference import TdxReferenceValues, validate_quote
from contrast.attestation.tdx.tcbstatus import TcbStatus
from contrast.attestation.tdx.trust import GENUINE_INTEL_ROOTS
from contrast.attestation.tdx.verify import verify_quote_bytes
from tests.attestation.tdx.vectors import VALID

NOW = datetime(2026, 3, 1, tzinfo=UTC)
REPORT_DATA = bytes(range(64))
POLICY = bytes.fromhex("ab" * 32).ljust(48, b"\0")


@pytest.fixture(scope="module")
def tee(tmp_path_factory: pytest.TempPathFactory) -> EmulatedTdx:
    return EmulatedTdx(tmp_path_factory.mktemp("state"))


def test_quote_verifies_with_its_roots(tee: EmulatedTdx) -> None:
    quote = tee.issue(REPORT_DATA, POLICY)
    verified = verify_quote_bytes(quote, now=NOW, roots=tee.roots)
    claims = verified.claims()
    assert claims["report_data"] == REPORT_DATA.hex()
    assert claims["mr_config_id"] == POLICY.hex()
    assert claims["mr_td"] == DEFAULT_MR_TD.hex()
    assert claims["fmspc"] == FMSPC.hex()
    assert claims["version"] == 4
    assert not verified.genuine
    assert Quote.from_bytes(quote).to_bytes() == quote


def test_quote_is_in_the_real_format(tee: EmulatedTdx) -> None:
    quote = Quote.from_bytes(tee.issue(REPORT_DATA))
    signature_data = quote.signature_data
    assert signature_data.certification.type == 6
    qe = signature_data.qe_certification
    assert qe is not None
    assert qe.certification.type == 5
    assert qe.certification.data.count(b"-----BEGIN CERTIFICATE-----") == 3
    assert not quote.body.debug


def test_quote_fails_against_intel_roots(tee: EmulatedTdx) -> None:
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(tee.issue(REPORT_DATA), now=NOW, roots=GENUINE_INTEL_ROOTS)
    assert caught.value.reason is Reason.UNTRUSTED_PCK


def test_collateral_rates_the_platform_up_to_date(tee: EmulatedTdx) -> None:
    verified = verify_quote_bytes(
        tee.issue(REPORT_DATA), now=NOW, roots=tee.roots, collateral=tee.collateral(now=NOW)
    )
    assert verified.claims()["tcb_status"] == "UpToDate"


def test_collateral_of_another_emulated_tee_is_refused(tee: EmulatedTdx, tmp_path: Path) -> None:
    other = EmulatedTdx(tmp_path)
    with pytest.raises(AttestationError) as caught:
        verify_quote_bytes(
            tee.issue(REPORT_DATA), now=NOW, roots=tee.roots, collateral=other.collateral(now=NOW)
        )
    assert caught.value.reason is Reason.BAD_TCB_INFO_SIGNATURE


def test_real_reference_values_never_accept_emulated_quotes(tee: EmulatedTdx) -> None:
    """Even with a real vector's MRTD and RTMRs copied into the emulated quote."""
    real = VALID[0].expected["td"]
    mr_td = bytes.fromhex(real["mr_td"])
    rtmrs = tuple(bytes.fromhex(real[f"rtmr{i}"]) for i in range(4))
    assert len(rtmrs) == 4
    quote = tee.issue(REPORT_DATA, mr_td=mr_td, rtmrs=rtmrs)  # type: ignore[arg-type]
    verified = verify_quote_bytes(
        quote, now=NOW, roots=tee.roots, collateral=tee.collateral(now=NOW)
    )
    reference = TdxReferenceValues(mr_td=frozenset({mr_td}), rtmrs=rtmrs)  # type: ignore[arg-type]
    with pytest.raises(ReferenceMismatch) as caught:
        validate_quote(verified, reference)
    assert caught.value.reason is Reason.EMULATED_EVIDENCE


def test_emulated_reference_values_accept_it(tee: EmulatedTdx) -> None:
    verified = verify_quote_bytes(
        tee.issue(REPORT_DATA, POLICY),
        now=NOW,
        roots=tee.roots,
        collateral=tee.collateral(now=NOW),
    )
    reference = TdxReferenceValues(
        mr_td=frozenset({DEFAULT_MR_TD}),
        mr_config_id=POLICY,
        report_data=REPORT_DATA,
        accepted_tcb_statuses=frozenset({TcbStatus.UP_TO_DATE}),
        emulated=True,
    )
    validate_quote(verified, reference)


def test_a_real_mrtd_reference_is_not_met_by_default(tee: EmulatedTdx) -> None:
    verified = verify_quote_bytes(tee.issue(REPORT_DATA), now=NOW, roots=tee.roots)
    real_mr_td = bytes.fromhex(VALID[0].expected["td"]["mr_td"])
    reference = TdxReferenceValues(
        mr_td=frozenset({real_mr_td}), accepted_tcb_statuses=frozenset(), emulated=True
    )
    with pytest.raises(ReferenceMismatch) as caught:
        validate_quote(verified, reference)
    assert caught.value.field == "MrTd"


def test_debug_td_attributes_are_carried(tee: EmulatedTdx) -> None:
    debug = (1 | 1 << 28).to_bytes(8, "little")
    verified = verify_quote_bytes(
        tee.issue(REPORT_DATA, td_attributes=debug), now=NOW, roots=tee.roots
    )
    assert verified.quote.body.debug


def test_state_is_reused_and_keys_are_private(tmp_path: Path) -> None:
    first = EmulatedTdx(tmp_path)
    quote = first.issue(REPORT_DATA)
    second = EmulatedTdx(tmp_path)
    verify_quote_bytes(quote, now=NOW, roots=second.roots)
    keys = list((tmp_path / "tdx").glob("*.key"))
    assert len(keys) == 5
    for key in keys:
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".tdx-*"))


@pytest.mark.parametrize(
    ("arguments", "keywords"),
    [
        ((bytes(63),), {}),
        ((bytes(64), bytes(47)), {}),
        ((bytes(64),), {"mr_td": bytes(47)}),
        ((bytes(64),), {"td_attributes": bytes(7)}),
    ],
)
def test_wrong_sizes_are_refused(
    tee: EmulatedTdx, arguments: tuple[bytes, ...], keywords: dict[str, bytes]
) -> None:
    with pytest.raises(AttestationError) as caught:
        tee.issue(*arguments, **keywords)  # type: ignore[arg-type]
    assert caught.value.reason is Reason.ISSUER_FAILED
