"""Choosing the guest interface, and turning what it gave into verifiable `Evidence`."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from contrast.attestation import certificates
from contrast.attestation.certificates import parse_time
from contrast.attestation.errors import EvidenceUnavailable, MalformedEvidence, Reason
from contrast.attestation.evidence import Tee
from contrast.attestation.guest import issuer
from contrast.attestation.guest.issuer import EvidenceFormat, GuestEvidence
from contrast.attestation.snp import trust, verify
from contrast.attestation.snp.certtable import CRL_GUID, VCEK_GUID, CertTable
from contrast.attestation.snp.kds import HttpResponse, KdsClient
from contrast.errors import ContrastError
from tests.attestation.guest.fakes import (
    FakeSevGuest,
    FakeTdxGuest,
    FakeTsmKernel,
    milan_chain_der,
    snp_cert_table,
    vcek_der,
)
from tests.conftest import ATTESTATION_DATA, require_shared

REPORT_DATA = bytes(range(1, 65))


@pytest.fixture(autouse=True)
def _shared() -> None:
    require_shared()


@pytest.fixture
def configfs_root(tmp_path: Path) -> Path:
    root = tmp_path / "tsm" / "report"
    root.mkdir(parents=True)
    return root


@pytest.fixture
def dev_dir(tmp_path: Path) -> Path:
    path = tmp_path / "dev"
    path.mkdir()
    return path


def test_configfs_comes_first(configfs_root: Path, dev_dir: Path) -> None:
    (dev_dir / "sev-guest").touch()
    sev = FakeSevGuest()
    kernel = FakeTsmKernel(auxblob=snp_cert_table())

    evidence = issuer.issue(
        REPORT_DATA, configfs_root=configfs_root, dev_dir=dev_dir, filesystem=kernel, ioctl=sev
    )

    assert evidence.platform is Tee.SNP
    assert evidence.format is EvidenceFormat.SNP_REPORT
    assert evidence.source == "configfs-tsm (sev_guest)"
    assert evidence.evidence[0x50:0x90] == REPORT_DATA
    assert evidence.aux_blob == snp_cert_table()
    assert sev.calls == []


def test_configfs_without_provider_falls_back_to_sev_guest(
    configfs_root: Path, dev_dir: Path
) -> None:
    (dev_dir / "sev-guest").touch()
    sev = FakeSevGuest(host_certificates=snp_cert_table())

    evidence = issuer.issue(
        REPORT_DATA,
        configfs_root=configfs_root,
        dev_dir=dev_dir,
        filesystem=FakeTsmKernel(provider=None),
        ioctl=sev,
    )

    assert evidence.source == str(dev_dir / "sev-guest")
    assert evidence.format is EvidenceFormat.SNP_REPORT
    assert evidence.evidence[0x50:0x90] == REPORT_DATA
    assert evidence.aux_blob is not None
    assert evidence.aux_blob.startswith(snp_cert_table())
    assert [call.request for call in sev.calls] == [0xC0205302]


def test_configfs_failure_is_not_hidden_by_a_fallback(configfs_root: Path, dev_dir: Path) -> None:
    (dev_dir / "sev-guest").touch()
    kernel = FakeTsmKernel(outblob_error=OSError(5, "Input/output error"))

    with pytest.raises(EvidenceUnavailable) as raised:
        issuer.issue(
            REPORT_DATA,
            configfs_root=configfs_root,
            dev_dir=dev_dir,
            filesystem=kernel,
            ioctl=FakeSevGuest(),
        )
    assert raised.value.reason is Reason.ISSUER_FAILED


def test_tdx_guest_gives_a_tdreport(tmp_path: Path, dev_dir: Path) -> None:
    (dev_dir / "tdx_guest").touch()

    evidence = issuer.issue(
        REPORT_DATA, configfs_root=tmp_path / "none", dev_dir=dev_dir, ioctl=FakeTdxGuest()
    )

    assert evidence.platform is Tee.TDX
    assert evidence.format is EvidenceFormat.TDREPORT
    assert evidence.evidence[128:192] == REPORT_DATA
    with pytest.raises(EvidenceUnavailable, match="TDREPORT") as raised:
        evidence.to_evidence()
    assert raised.value.reason is Reason.ISSUER_FAILED
    assert raised.value.hint is not None
    assert "configfs" in raised.value.hint


def test_no_tee_names_every_path(tmp_path: Path, dev_dir: Path) -> None:
    root = tmp_path / "tsm" / "report"

    with pytest.raises(EvidenceUnavailable) as raised:
        issuer.issue(REPORT_DATA, configfs_root=root, dev_dir=dev_dir)

    error = raised.value
    assert error.reason is Reason.NO_TEE
    assert str(error) == (
        f"no TEE found: looked at {root}, {dev_dir / 'sev-guest'}, {dev_dir / 'tdx_guest'}"
    )
    assert error.hint == "run inside an SEV-SNP or TDX confidential VM, or use the emulated TEE"


def test_no_tee_mentions_a_providerless_configfs(configfs_root: Path, dev_dir: Path) -> None:
    with pytest.raises(EvidenceUnavailable) as raised:
        issuer.issue(
            REPORT_DATA,
            configfs_root=configfs_root,
            dev_dir=dev_dir,
            filesystem=FakeTsmKernel(provider=None),
        )
    assert raised.value.reason is Reason.NO_TEE
    assert f"{configfs_root} (no provider registered)" in str(raised.value)


@pytest.mark.parametrize("length", [0, 32, 63, 65, 128])
def test_report_data_length(tmp_path: Path, length: int) -> None:
    with pytest.raises(ContrastError) as raised:
        issuer.issue(bytes(length), configfs_root=tmp_path, dev_dir=tmp_path)
    assert not isinstance(raised.value, EvidenceUnavailable)
    assert str(raised.value) == f"report data must be exactly 64 bytes, got {length}"


def test_to_evidence_orders_the_endorsements() -> None:
    ask, ark = milan_chain_der()
    crl = b"crl bytes"
    table = CertTable.from_entries(
        [(CRL_GUID, crl), (issuer.ARK_GUID, ark), (issuer.ASK_GUID, ask), (VCEK_GUID, vcek_der())]
    ).to_bytes()
    guest = GuestEvidence(Tee.SNP, EvidenceFormat.SNP_REPORT, b"report", table + bytes(100), "test")

    evidence = guest.to_evidence()

    assert evidence.platform is Tee.SNP
    assert evidence.report == b"report"
    assert evidence.endorsements == (vcek_der(), ask, ark, crl)


def test_to_evidence_without_certificates() -> None:
    guest = GuestEvidence(Tee.TDX, EvidenceFormat.TDX_QUOTE, b"quote", None, "test")
    assert guest.to_evidence().endorsements == ()


def test_to_evidence_with_a_broken_table() -> None:
    guest = GuestEvidence(Tee.SNP, EvidenceFormat.SNP_REPORT, b"report", b"\x01" * 30, "test")
    with pytest.raises(MalformedEvidence) as raised:
        guest.to_evidence()
    assert raised.value.reason is Reason.MALFORMED_CERT_TABLE


def test_issued_evidence_verifies_end_to_end(configfs_root: Path, dev_dir: Path) -> None:
    """The real report, asked for with its own REPORT_DATA, comes out verifiable.

    The fake kernel puts our report data into the real report, so with the report data the report
    was signed over the bytes are unchanged and the genuine AMD chain must accept them.
    """
    vector = ATTESTATION_DATA / "snp" / "oak-milan-v3-rk-release"
    expected = json.loads((vector / "expected.json").read_text())
    report_data = bytes.fromhex(expected["report"]["report_data"])
    kernel = FakeTsmKernel(auxblob=snp_cert_table())

    evidence = issuer.issue(
        report_data, configfs_root=configfs_root, dev_dir=dev_dir, filesystem=kernel
    ).to_evidence()

    assert evidence.report == (vector / "report.bin").read_bytes()
    chain = [certificates.load_certificate(blob) for blob in evidence.endorsements]
    verified = verify.verify_evidence(
        evidence.report,
        chain,
        now=parse_time(expected["valid_at"]),
        roots=trust.GENUINE_AMD_ROOTS,
    )
    assert verified.report.report_data == report_data


class RecordingFetch:
    """A `kds.Fetch` that answers every URL with one response (or error) and records the URLs."""

    def __init__(self, answer: HttpResponse | OSError) -> None:
        self.answer = answer
        self.urls: list[str] = []

    def __call__(self, url: str) -> HttpResponse:
        self.urls.append(url)
        if isinstance(self.answer, OSError):
            raise self.answer
        return self.answer


def real_milan_evidence() -> tuple[GuestEvidence, dict[str, Any]]:
    vector = ATTESTATION_DATA / "snp" / "oak-milan-v3-rk-release"
    expected = json.loads((vector / "expected.json").read_text())
    report = (vector / "report.bin").read_bytes()
    return GuestEvidence(Tee.SNP, EvidenceFormat.SNP_REPORT, report, None, "test"), expected


def test_missing_vcek_is_fetched_from_the_kds() -> None:
    guest, expected = real_milan_evidence()
    fetch = RecordingFetch(HttpResponse(200, vcek_der()))

    evidence = guest.to_evidence(kds=KdsClient(None, fetch=fetch))

    assert fetch.urls == [
        f"https://kdsintf.amd.com/vcek/v1/Milan/{expected['report']['chip_id']}"
        "?blSPL=4&teeSPL=0&snpSPL=24&ucodeSPL=219"
    ]
    assert evidence.endorsements == (vcek_der(),)
    verified = verify.verify_evidence(
        evidence.report,
        [certificates.load_certificate(evidence.endorsements[0])],
        now=parse_time(expected["valid_at"]),
        roots=trust.GENUINE_AMD_ROOTS,
    )
    assert verified.report.chip_id.hex() == expected["report"]["chip_id"]


def test_host_supplied_vcek_is_not_fetched_again() -> None:
    guest, _ = real_milan_evidence()
    guest = dataclasses.replace(guest, aux_blob=snp_cert_table())
    fetch = RecordingFetch(OSError("must not be called"))

    evidence = guest.to_evidence(kds=KdsClient(None, fetch=fetch))

    assert fetch.urls == []
    assert evidence.endorsements[0] == vcek_der()


def test_kds_failure_sends_the_evidence_without_a_vcek(caplog: pytest.LogCaptureFixture) -> None:
    guest, _ = real_milan_evidence()
    fetch = RecordingFetch(OSError("network is unreachable"))

    with caplog.at_level(logging.WARNING, logger=issuer.__name__):
        evidence = guest.to_evidence(kds=KdsClient(None, fetch=fetch, sleep=lambda _: None))

    assert evidence.endorsements == ()
    assert len(fetch.urls) == 4
    assert "sending the evidence without a VCEK" in caplog.text
    assert "network is unreachable" in caplog.text
