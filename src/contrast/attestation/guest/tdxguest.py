"""TDREPORTs through the `/dev/tdx_guest` ioctl (Linux include/uapi/linux/tdx-guest.h).

    struct tdx_report_req {               // 1088 bytes, passed inline (no pointers)
        __u8 reportdata[64];              // in: REPORTDATA
        __u8 tdreport[1024];              // out: TDREPORT_STRUCT
    };
    TDX_CMD_GET_REPORT0 = _IOWR('T', 1, struct tdx_report_req) = 0xC4405401

A TDREPORT is *not* remotely verifiable: it is MACed with a key only this CPU holds, so only the
Quoting Enclave on the same host can check it and turn it into a signed quote. Upstream kernels
get a quote through configfs-tsm (`/sys/kernel/config/tsm/report`, provider `tdx_guest`, Linux
6.7+), which asks the VMM to have the host's Quote Generation Service (QGS, Intel DCAP) sign it;
the TDX_CMD_GET_QUOTE ioctl that some vendor kernels carry is not in upstream Linux. So this module
is the last resort of `issuer.issue`: useful to show that the guest is a TD and to debug the QGS
path, not as evidence for a remote verifier.
"""

from __future__ import annotations

from pathlib import Path

from contrast.attestation.errors import EvidenceUnavailable, Reason
from contrast.attestation.guest.ioctl import Ioctl, iowr, open_device, system_ioctl
from contrast.attestation.guest.reportdata import REPORT_DATA_SIZE, require_report_data

DEFAULT_DEVICE = Path("/dev/tdx_guest")
TDREPORT_SIZE = 1024
REPORT_REQUEST_SIZE = REPORT_DATA_SIZE + TDREPORT_SIZE  # 1088
TDX_CMD_GET_REPORT0 = iowr("T", 1, REPORT_REQUEST_SIZE)
# Inside the TDREPORT: REPORTMACSTRUCT starts with REPORTTYPE {type 0x81 = TDX, subtype, version}
# and carries REPORTDATA at offset 128 (TDX module ABI, "REPORTMACSTRUCT").
TDREPORT_TYPE_TDX = 0x81
TDREPORT_REPORT_DATA_OFFSET = 128


def get_tdreport(
    report_data: bytes,
    *,
    device: Path = DEFAULT_DEVICE,
    ioctl: Ioctl = system_ioctl,
) -> bytes:
    """TDX_CMD_GET_REPORT0: the 1024-byte TDREPORT with `report_data` (64 bytes) in it."""
    request = bytearray(require_report_data(report_data) + bytes(TDREPORT_SIZE))
    with open_device(device) as descriptor:
        try:
            ioctl(descriptor, TDX_CMD_GET_REPORT0, request)
        except OSError as error:
            raise EvidenceUnavailable(
                Reason.ISSUER_FAILED,
                f"{device} TDX_CMD_GET_REPORT0 failed: {error.strerror or error}",
                hint="check the guest kernel log (dmesg) for the TDX module's error",
            ) from None
    tdreport = bytes(request[REPORT_DATA_SIZE:])
    if tdreport[0] != TDREPORT_TYPE_TDX:
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED,
            f"{device} returned no TDREPORT (report type {tdreport[0]:#04x}, expected"
            f" {TDREPORT_TYPE_TDX:#04x})",
        )
    return tdreport
