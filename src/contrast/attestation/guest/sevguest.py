"""SEV-SNP reports through the `/dev/sev-guest` ioctls (Linux include/uapi/linux/sev-guest.h).

This is the path for kernels without configfs-tsm (before 6.7) or where configfs is not mounted.
The driver takes a 32-byte `snp_guest_request_ioctl` whose `req_data` and `resp_data` are user
space addresses of the request and response structures; the layouts below are the C ones, checked
with `ctypes.sizeof` at import:

    struct snp_guest_request_ioctl {      // 32 bytes
        __u8  msg_version;                // offset 0, always 1; 7 bytes of padding follow
        __u64 req_data;                   // offset 8
        __u64 resp_data;                  // offset 16
        union { __u64 exitinfo2;          // offset 24
                struct { __u32 fw_error; __u32 vmm_error; }; };
    };
    struct snp_report_req {               // 96 bytes
        __u8  user_data[64];              // REPORT_DATA
        __u32 vmpl;
        __u8  rsvd[28];
    };
    struct snp_ext_report_req {           // 112 bytes (108 plus tail padding to 8)
        struct snp_report_req data;
        __u64 certs_address;              // offset 96: page-aligned buffer for the cert table
        __u32 certs_len;                  // offset 104: its size, a multiple of 4096
    };
    struct snp_report_resp { __u8 data[4000]; };   // MSG_REPORT_RSP, see below

    SNP_GET_REPORT     = _IOWR('S', 0x0, struct snp_guest_request_ioctl) = 0xC0205300
    SNP_GET_EXT_REPORT = _IOWR('S', 0x2, struct snp_guest_request_ioctl) = 0xC0205302

MSG_REPORT_RSP (SEV-SNP firmware ABI, table "MSG_REPORT_RSP"): status u32, report_size u32,
24 reserved bytes, then the 1184-byte ATTESTATION_REPORT.

When the certificate buffer of an extended request is too small, the call fails with
`vmm_error == SNP_GUEST_VMM_ERR_INVALID_LEN` (1) and the kernel writes the size the host needs
into `certs_len`; the request is then repeated with a buffer that large (as go-sev-guest does).
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from pathlib import Path

from contrast.attestation.errors import AttestationPackageError, EvidenceUnavailable, Reason
from contrast.attestation.guest.ioctl import Ioctl, iowr, open_device, system_ioctl
from contrast.attestation.guest.reportdata import REPORT_DATA_SIZE, require_report_data

DEFAULT_DEVICE = Path("/dev/sev-guest")
REPORT_SIZE = 0x4A0
MESSAGE_VERSION = 1
PAGE_SIZE = 4096
# Two pages hold a VCEK, ASK and ARK (about 4.7 KiB) and a CRL; a host that sends more says so
# through INVALID_LEN and the request is repeated with the size it asked for.
DEFAULT_CERTS_SIZE = 2 * PAGE_SIZE
# The kernel refuses larger buffers with EINVAL (SEV_FW_BLOB_MAX_SIZE in linux/psp-sev.h).
MAX_CERTS_SIZE = 0x4000
SNP_GUEST_VMM_ERR_INVALID_LEN = 1
SNP_GUEST_VMM_ERR_BUSY = 2

# struct snp_guest_request_ioctl, packed by hand so the bytes the driver sees are explicit.
_GUEST_REQUEST = struct.Struct("<B7xQQQ")
GUEST_REQUEST_SIZE = _GUEST_REQUEST.size  # 32
EXITINFO2_OFFSET = 24

SNP_GET_REPORT = iowr("S", 0x0, GUEST_REQUEST_SIZE)
SNP_GET_EXT_REPORT = iowr("S", 0x2, GUEST_REQUEST_SIZE)

# MSG_REPORT_RSP.
_RESPONSE_HEADER = struct.Struct("<II24x")
RESPONSE_SIZE = 4000
RESPONSE_HEADER_SIZE = _RESPONSE_HEADER.size  # 32

# Firmware status codes of MSG_REPORT_RSP (SEV-SNP ABI, "Status Codes").
_FIRMWARE_STATUS = {0x16: "INVALID_PARAM", 0x27: "INVALID_KEY"}


class SnpReportRequest(ctypes.Structure):
    """`struct snp_report_req`."""

    _fields_ = (
        ("user_data", ctypes.c_uint8 * REPORT_DATA_SIZE),
        ("vmpl", ctypes.c_uint32),
        ("rsvd", ctypes.c_uint8 * 28),
    )


class SnpExtReportRequest(ctypes.Structure):
    """`struct snp_ext_report_req`."""

    _fields_ = (
        ("data", SnpReportRequest),
        ("certs_address", ctypes.c_uint64),
        ("certs_len", ctypes.c_uint32),
    )


REPORT_REQUEST_SIZE = ctypes.sizeof(SnpReportRequest)
EXT_REPORT_REQUEST_SIZE = ctypes.sizeof(SnpExtReportRequest)
assert REPORT_REQUEST_SIZE == 96, REPORT_REQUEST_SIZE
assert EXT_REPORT_REQUEST_SIZE == 112, EXT_REPORT_REQUEST_SIZE
CERTS_ADDRESS_OFFSET = SnpExtReportRequest.certs_address.offset  # 96
CERTS_LEN_OFFSET = SnpExtReportRequest.certs_len.offset  # 104


@dataclass(frozen=True)
class SnpIoctlReport:
    """What the driver returned: the report and, for an extended request, the certificate table.

    `certificates` is the whole buffer the host filled (a GHCB certificate table followed by
    zero padding); None for a plain report or when the host supplied no certificates.
    """

    report: bytes
    certificates: bytes | None


def get_report(
    report_data: bytes,
    *,
    vmpl: int = 0,
    device: Path = DEFAULT_DEVICE,
    ioctl: Ioctl = system_ioctl,
) -> SnpIoctlReport:
    """SNP_GET_REPORT: a report with `report_data` (64 bytes) at the given VMPL."""
    request = _report_request(report_data, vmpl)
    with open_device(device) as descriptor:
        response = _call(ioctl, descriptor, SNP_GET_REPORT, request, "SNP_GET_REPORT")
    return SnpIoctlReport(_report_from_response(response), None)


def get_extended_report(
    report_data: bytes,
    *,
    vmpl: int = 0,
    device: Path = DEFAULT_DEVICE,
    ioctl: Ioctl = system_ioctl,
    certs_size: int = DEFAULT_CERTS_SIZE,
) -> SnpIoctlReport:
    """SNP_GET_EXT_REPORT: the report plus the certificate table the host keeps for this chip."""
    request = SnpExtReportRequest()
    request.data = _report_request(report_data, vmpl)
    size = _page_multiple(certs_size)
    with open_device(device) as descriptor:
        # One retry is what the protocol needs (the host states its size); the second guards
        # against a host whose table grew in between.
        for _ in range(3):
            certificates = ctypes.create_string_buffer(size)
            request.certs_address = ctypes.addressof(certificates)
            request.certs_len = size
            try:
                response = _call(ioctl, descriptor, SNP_GET_EXT_REPORT, request, "extended report")
            except _CertificateBufferTooSmall:
                needed = request.certs_len
                if needed <= size or needed > MAX_CERTS_SIZE:
                    raise EvidenceUnavailable(
                        Reason.ISSUER_FAILED,
                        f"the host asked for a {needed}-byte certificate buffer after"
                        f" {size} bytes were too small",
                        hint="the hypervisor's certificate blob is inconsistent",
                    ) from None
                size = _page_multiple(needed)
                continue
            report = _report_from_response(response)
            table = certificates.raw
            return SnpIoctlReport(report, table if any(table) else None)
    raise EvidenceUnavailable(
        Reason.ISSUER_FAILED,
        "the host kept changing the size of the SNP certificate table",
        hint="retry; if it persists, the hypervisor's certificate blob is being rewritten",
    )


class _CertificateBufferTooSmall(Exception):
    """vmm_error INVALID_LEN: the kernel wrote the needed size into certs_len."""


def _report_request(report_data: bytes, vmpl: int) -> SnpReportRequest:
    report_data = require_report_data(report_data)
    if not 0 <= vmpl <= 3:
        raise AttestationPackageError(f"VMPL must be 0 to 3, got {vmpl}")
    request = SnpReportRequest()
    ctypes.memmove(request.user_data, report_data, REPORT_DATA_SIZE)
    request.vmpl = vmpl
    return request


def _call(
    ioctl: Ioctl,
    descriptor: int,
    number: int,
    request: ctypes.Structure,
    what: str,
) -> bytes:
    """Issue one guest request; returns the 4000-byte response buffer."""
    response = ctypes.create_string_buffer(RESPONSE_SIZE)
    argument = bytearray(
        _GUEST_REQUEST.pack(
            MESSAGE_VERSION, ctypes.addressof(request), ctypes.addressof(response), 0
        )
    )
    try:
        ioctl(descriptor, number, argument)
    except OSError as error:
        exitinfo2 = int.from_bytes(argument[EXITINFO2_OFFSET : EXITINFO2_OFFSET + 8], "little")
        fw_error, vmm_error = exitinfo2 & 0xFFFFFFFF, exitinfo2 >> 32
        if vmm_error == SNP_GUEST_VMM_ERR_INVALID_LEN and number == SNP_GET_EXT_REPORT:
            raise _CertificateBufferTooSmall from None
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED,
            f"/dev/sev-guest {what} failed: {error.strerror or error}"
            f" (firmware error {fw_error:#x}, VMM error {vmm_error:#x})",
            hint="retry if the VMM was busy; otherwise check the guest kernel log (dmesg)",
        ) from None
    return response.raw


def _report_from_response(response: bytes) -> bytes:
    status, size = _RESPONSE_HEADER.unpack_from(response)
    if status != 0:
        name = _FIRMWARE_STATUS.get(status, "unknown status")
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED,
            f"the SEV firmware refused the report request: status {status:#x} ({name})",
            hint="check the requested VMPL: a guest cannot ask for a more privileged one",
        )
    if size != REPORT_SIZE:
        raise EvidenceUnavailable(
            Reason.ISSUER_FAILED,
            f"the SEV firmware returned a {size}-byte report, expected {REPORT_SIZE}",
        )
    return response[RESPONSE_HEADER_SIZE : RESPONSE_HEADER_SIZE + REPORT_SIZE]


def _page_multiple(size: int) -> int:
    return max(PAGE_SIZE, -(-size // PAGE_SIZE) * PAGE_SIZE)
