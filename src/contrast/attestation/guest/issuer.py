"""Evidence from the confidential VM this process runs in, from whichever interface it offers.

The order follows Contrast's issuers (research/attestation.md §7): configfs-tsm first, since it
is the one upstream interface for both TEEs and the only one that yields a TDX quote; then the
legacy `/dev/sev-guest` extended report (report plus the host's certificate table); then
`/dev/tdx_guest`, which only yields a TDREPORT (see `tdxguest` for why that is not enough for a
remote verifier).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from cryptography.hazmat.primitives.serialization import Encoding

from contrast.attestation.errors import EvidenceUnavailable, MalformedEvidence, Reason
from contrast.attestation.evidence import Evidence
from contrast.attestation.guest import configfs, sevguest, tdxguest
from contrast.attestation.guest.ioctl import Ioctl, system_ioctl
from contrast.attestation.guest.reportdata import require_report_data
from contrast.attestation.snp.certtable import (
    ARK_GUID,
    ASK_GUID,
    CRL_GUID,
    VCEK_GUID,
    VLEK_GUID,
    CertTable,
)
from contrast.attestation.snp.kds import KdsClient
from contrast.attestation.snp.report import Report, SigningKey
from contrast.attestation.tee import Tee

log = logging.getLogger(__name__)

SEV_GUEST_DEVICE = "sev-guest"
TDX_GUEST_DEVICE = "tdx_guest"
# The order in which table entries become endorsements: the signing key first, then its chain.
_ENDORSEMENT_ORDER = (VCEK_GUID, VLEK_GUID, ASK_GUID, ARK_GUID, CRL_GUID)


class EvidenceFormat(StrEnum):
    SNP_REPORT = "snp-report"
    TDX_QUOTE = "tdx-quote"
    TDREPORT = "tdreport"


@dataclass(frozen=True)
class GuestEvidence:
    """Evidence as the guest interface returned it, with where it came from."""

    platform: Tee
    format: EvidenceFormat
    # The SNP report, the TDX quote, or the TDREPORT.
    evidence: bytes
    # SNP: the GHCB certificate table (VCEK/VLEK, ASK, ARK as the host supplied them), or None.
    aux_blob: bytes | None
    # "configfs-tsm (sev_guest)", "/dev/sev-guest", "/dev/tdx_guest": for messages and logs.
    source: str

    def to_evidence(self, *, kds: KdsClient | None = None) -> Evidence:
        """The `Evidence` a verifier takes: the report or quote, and the host's certificates.

        With `kds`, an SNP report whose host supplied no VCEK gets one from the AMD KDS, as
        Contrast's issuer does, so verifiers need no KDS access of their own. That fetch is a
        convenience: when it fails the evidence goes out without the VCEK and a warning is logged.

        Raises MalformedEvidence for a certificate table or report that does not parse, and
        EvidenceUnavailable for a TDREPORT, which no remote verifier can check.
        """
        if self.format is EvidenceFormat.TDREPORT:
            raise EvidenceUnavailable(
                Reason.ISSUER_FAILED,
                f"{self.source} gave a TDREPORT, which only this host's Quoting Enclave can"
                " check; a remote verifier needs a TDX quote",
                hint="mount configfs at /sys/kernel/config (Linux 6.7+ with CONFIG_TSM_REPORTS)"
                " and run the host's Quote Generation Service",
            )
        # An empty blob parses as an empty table.
        table = CertTable.from_bytes(self.aux_blob or b"")
        endorsements = tuple(
            blob for guid in _ENDORSEMENT_ORDER if (blob := table.get(guid)) is not None
        )
        missing_signing_key = table.signing_certificate is None
        if self.platform is Tee.SNP and kds is not None and missing_signing_key:
            vcek = _vcek_from_kds(self.evidence, kds)
            if vcek is not None:
                endorsements = (vcek, *endorsements)
        return Evidence(self.platform, self.evidence, endorsements)


def _vcek_from_kds(report_bytes: bytes, kds: KdsClient) -> bytes | None:
    """The DER VCEK for a report, or None (logged) when the KDS cannot provide it."""
    report = Report.from_bytes(report_bytes)
    if report.signing_key is not SigningKey.VCEK:
        log.warning(
            "the report is signed by its %s, which the KDS does not serve", report.signing_key.label
        )
        return None
    if report.product is None:
        log.warning(
            "cannot tell the product of a version %d report; not fetching its VCEK", report.version
        )
        return None
    tcb = report.reported_tcb
    try:
        vcek = kds.vcek(
            report.product.value,
            report.chip_id,
            bootloader=tcb.bootloader,
            tee=tcb.tee,
            snp=tcb.snp,
            microcode=tcb.microcode,
            fmc=tcb.fmc,
        )
    except (EvidenceUnavailable, MalformedEvidence) as error:
        log.warning("sending the evidence without a VCEK: %s", error.explain())
        return None
    return vcek.public_bytes(Encoding.DER)


def issue(
    report_data: bytes,
    *,
    configfs_root: Path = configfs.DEFAULT_ROOT,
    dev_dir: Path = Path("/dev"),
    filesystem: configfs.ConfigfsFilesystem | None = None,
    ioctl: Ioctl = system_ioctl,
) -> GuestEvidence:
    """Evidence over `report_data` (exactly 64 bytes) from the first interface that exists.

    Raises AttestationPackageError for report data of another length, EvidenceUnavailable(NO_TEE)
    naming every path looked at when there is no TEE interface, and
    EvidenceUnavailable(ISSUER_FAILED) when an interface exists but fails.
    """
    report_data = require_report_data(report_data)
    looked_at: list[str] = []
    if configfs.available(configfs_root):
        try:
            report = configfs.get_report(report_data, root=configfs_root, filesystem=filesystem)
        except EvidenceUnavailable as error:
            if error.reason is not Reason.NO_TEE:
                raise
            looked_at.append(f"{configfs_root} (no provider registered)")
        else:
            return GuestEvidence(
                platform=report.platform,
                format=(
                    EvidenceFormat.SNP_REPORT
                    if report.platform is Tee.SNP
                    else EvidenceFormat.TDX_QUOTE
                ),
                evidence=report.outblob,
                aux_blob=report.auxblob,
                source=f"configfs-tsm ({report.provider})",
            )
    else:
        looked_at.append(str(configfs_root))

    sev_guest = dev_dir / SEV_GUEST_DEVICE
    if sev_guest.exists():
        extended = sevguest.get_extended_report(report_data, device=sev_guest, ioctl=ioctl)
        return GuestEvidence(
            Tee.SNP,
            EvidenceFormat.SNP_REPORT,
            extended.report,
            extended.certificates,
            str(sev_guest),
        )
    looked_at.append(str(sev_guest))

    tdx_guest = dev_dir / TDX_GUEST_DEVICE
    if tdx_guest.exists():
        tdreport = tdxguest.get_tdreport(report_data, device=tdx_guest, ioctl=ioctl)
        return GuestEvidence(Tee.TDX, EvidenceFormat.TDREPORT, tdreport, None, str(tdx_guest))
    looked_at.append(str(tdx_guest))

    raise EvidenceUnavailable(
        Reason.NO_TEE,
        f"no TEE found: looked at {', '.join(looked_at)}",
        hint="run inside an SEV-SNP or TDX confidential VM, or use the emulated TEE",
    )
