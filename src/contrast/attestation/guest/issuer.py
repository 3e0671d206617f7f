"""Evidence from the confidential VM this process runs in, from whichever interface it offers.

The order follows Contrast's issuers (research/attestation.md §7): configfs-tsm first, since it
is the one upstream interface for both TEEs and the only one that yields a TDX quote; then the
legacy `/dev/sev-guest` extended report (report plus the host's certificate table); then
`/dev/tdx_guest`, which only yields a TDREPORT (see `tdxguest` for why that is not enough for a
remote verifier).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from contrast.attestation.errors import EvidenceUnavailable, Reason
from contrast.attestation.evidence import Evidence, Platform
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

    platform: Platform
    format: EvidenceFormat
    # The SNP report, the TDX quote, or the TDREPORT.
    evidence: bytes
    # SNP: the GHCB certificate table (VCEK/VLEK, ASK, ARK as the host supplied them), or None.
    aux_blob: bytes | None
    # "configfs-tsm (sev_guest)", "/dev/sev-guest", "/dev/tdx_guest": for messages and logs.
    source: str

    def to_evidence(self) -> Evidence:
        """The `Evidence` a verifier takes: the report or quote, and the host's certificates.

        Raises MalformedEvidence for a certificate table that does not parse, and
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
        endorsements: tuple[bytes, ...] = ()
        if self.aux_blob:
            table = CertTable.from_bytes(self.aux_blob)
            endorsements = tuple(
                blob for guid in _ENDORSEMENT_ORDER if (blob := table.get(guid)) is not None
            )
        return Evidence(self.platform, self.evidence, endorsements)


def issue(
    report_data: bytes,
    *,
    configfs_root: Path = configfs.DEFAULT_ROOT,
    dev_dir: Path = Path("/dev"),
    filesystem: configfs.ConfigfsFilesystem | None = None,
    ioctl: Ioctl = system_ioctl,
) -> GuestEvidence:
    """Evidence over `report_data` (exactly 64 bytes) from the first interface that exists.

    Raises ContrastError for report data of another length, EvidenceUnavailable(NO_TEE) naming
    every path looked at when there is no TEE interface, and EvidenceUnavailable(ISSUER_FAILED)
    when an interface exists but fails.
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
                    if report.platform is Platform.SNP
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
            Platform.SNP,
            EvidenceFormat.SNP_REPORT,
            extended.report,
            extended.certificates,
            str(sev_guest),
        )
    looked_at.append(str(sev_guest))

    tdx_guest = dev_dir / TDX_GUEST_DEVICE
    if tdx_guest.exists():
        tdreport = tdxguest.get_tdreport(report_data, device=tdx_guest, ioctl=ioctl)
        return GuestEvidence(Platform.TDX, EvidenceFormat.TDREPORT, tdreport, None, str(tdx_guest))
    looked_at.append(str(tdx_guest))

    raise EvidenceUnavailable(
        Reason.NO_TEE,
        f"no TEE found: looked at {', '.join(looked_at)}",
        hint="run inside an SEV-SNP or TDX confidential VM, or use the emulated TEE",
    )
