"""Fakes that behave like the kernel's TEE guest interfaces, built from real evidence bytes.

`FakeTsmKernel` keeps configfs-tsm's rules on plain files in a temporary directory: the kernel
creates the attributes on mkdir, bumps `generation` on every write and removes the attributes
with the entry. `FakeSevGuest` and `FakeTdxGuest` stand in for the ioctl system call: they read
the request structures at the addresses the caller passed (as the driver's copy_from_user would),
record them, and write canned responses back.
"""

from __future__ import annotations

import ctypes
import errno
import struct
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from contrast.attestation import certificates
from contrast.attestation.guest import sevguest, tdxguest
from contrast.attestation.guest.configfs import ConfigfsFilesystem
from contrast.attestation.snp.certtable import ARK_GUID, ASK_GUID, VCEK_GUID, CertTable
from tests.conftest import ATTESTATION_DATA, REPO

SNP_VECTOR = ATTESTATION_DATA / "snp" / "oak-milan-v3-rk-release"
TDX_VECTOR = ATTESTATION_DATA / "tdx" / "trustee-azure-td-v4"
SNP_REPORT_DATA_OFFSET = 0x50
TDX_QUOTE_REPORT_DATA_OFFSET = 48 + 520
MILAN_ROOTS = REPO / "src" / "contrast" / "attestation" / "snp" / "roots" / "milan"


def snp_report() -> bytes:
    return (SNP_VECTOR / "report.bin").read_bytes()


def vcek_der() -> bytes:
    return (SNP_VECTOR / "vcek.der").read_bytes()


def milan_chain_der() -> tuple[bytes, bytes]:
    """The shipped Milan ASK and ARK, DER-encoded as a host puts them in the table."""
    ask, ark = (
        certificates.load_certificate((MILAN_ROOTS / name).read_bytes()).public_bytes(
            serialization.Encoding.DER
        )
        for name in ("ask.pem", "ark.pem")
    )
    return ask, ark


def snp_cert_table() -> bytes:
    ask, ark = milan_chain_der()
    return CertTable.from_entries(
        [(VCEK_GUID, vcek_der()), (ASK_GUID, ask), (ARK_GUID, ark)]
    ).to_bytes()


def tdx_quote() -> bytes:
    return (TDX_VECTOR / "quote.bin").read_bytes()


def tdreport() -> bytes:
    return (TDX_VECTOR / "tdreport.bin").read_bytes()


def with_report_data(evidence: bytes, offset: int, report_data: bytes) -> bytes:
    return evidence[:offset] + report_data + evidence[offset + len(report_data) :]


class FakeTsmKernel(ConfigfsFilesystem):
    """configfs-tsm with one provider, answering with a real report carrying our inblob."""

    def __init__(
        self,
        *,
        provider: str | None = "sev_guest",
        evidence: bytes | None = None,
        report_data_offset: int = SNP_REPORT_DATA_OFFSET,
        auxblob: bytes | None = b"",
        concurrent_writes: int = 0,
        outblob_error: OSError | None = None,
    ) -> None:
        self.provider = provider
        self.evidence = evidence if evidence is not None else snp_report()
        self.report_data_offset = report_data_offset
        self.auxblob = auxblob
        # How many of the next outblob reads another process interleaves a write with.
        self.concurrent_writes = concurrent_writes
        self.outblob_error = outblob_error
        self.made: list[Path] = []
        self.removed: list[Path] = []
        self.writes: list[tuple[str, bytes]] = []

    def make_entry(self, root: Path) -> Path:
        entry = super().make_entry(root)
        self.made.append(entry)
        if self.provider is not None:
            (entry / "provider").write_text(self.provider + "\n")
        (entry / "generation").write_text("0\n")
        if self.auxblob is not None:
            (entry / "auxblob").write_bytes(b"")
        return entry

    def _bump(self, entry: Path) -> None:
        generation = int((entry / "generation").read_text())
        (entry / "generation").write_text(f"{generation + 1}\n")

    def write(self, path: Path, data: bytes) -> None:
        if path.name == "inblob" and len(data) != 64:
            raise OSError(errno.EINVAL, "Invalid argument")
        super().write(path, data)
        self.writes.append((path.name, data))
        self._bump(path.parent)
        if path.name == "inblob":
            outblob = with_report_data(self.evidence, self.report_data_offset, data)
            (path.parent / "outblob").write_bytes(outblob)
            if self.auxblob is not None:
                (path.parent / "auxblob").write_bytes(self.auxblob)

    def read(self, path: Path) -> bytes:
        if path.name == "outblob" and self.outblob_error is not None:
            raise self.outblob_error
        data = super().read(path)
        if path.name == "outblob" and self.concurrent_writes > 0:
            self.concurrent_writes -= 1
            self._bump(path.parent)
        return data

    def remove_entry(self, entry: Path) -> None:
        for attribute in entry.iterdir():
            attribute.unlink()
        super().remove_entry(entry)
        self.removed.append(entry)


@dataclass(frozen=True)
class SevCall:
    """One recorded /dev/sev-guest ioctl, decoded from the bytes the driver would see."""

    request: int
    argument_size: int
    msg_version: int
    req_data: int
    resp_data: int
    exitinfo2: int
    request_bytes: bytes

    @property
    def user_data(self) -> bytes:
        return self.request_bytes[0:64]

    @property
    def vmpl(self) -> int:
        return int.from_bytes(self.request_bytes[64:68], "little")

    @property
    def reserved(self) -> bytes:
        return self.request_bytes[68:96]

    @property
    def certs_address(self) -> int:
        return int.from_bytes(self.request_bytes[96:104], "little")

    @property
    def certs_len(self) -> int:
        return int.from_bytes(self.request_bytes[104:108], "little")


@dataclass
class FakeSevGuest:
    """The sev-guest driver plus a host that holds `host_certificates` for the chip."""

    report: bytes = field(default_factory=snp_report)
    host_certificates: bytes = b""
    status: int = 0
    report_size: int = sevguest.REPORT_SIZE
    fw_error: int | None = None
    calls: list[SevCall] = field(default_factory=list)

    def __call__(self, descriptor: int, request: int, argument: bytearray) -> int:
        msg_version, req_data, resp_data, exitinfo2 = struct.unpack("<B7xQQQ", argument)
        size = (
            sevguest.EXT_REPORT_REQUEST_SIZE
            if request == sevguest.SNP_GET_EXT_REPORT
            else sevguest.REPORT_REQUEST_SIZE
        )
        call = SevCall(
            request,
            len(argument),
            msg_version,
            req_data,
            resp_data,
            exitinfo2,
            ctypes.string_at(req_data, size),
        )
        self.calls.append(call)
        if self.fw_error is not None:
            struct.pack_into("<Q", argument, 24, self.fw_error)
            raise OSError(errno.EIO, "Input/output error")
        if request == sevguest.SNP_GET_EXT_REPORT and self.host_certificates:
            needed = -(-len(self.host_certificates) // 4096) * 4096
            if call.certs_len < needed:
                # The driver writes the size the host needs back into the request.
                ctypes.memmove(req_data + 104, struct.pack("<I", needed), 4)
                struct.pack_into("<Q", argument, 24, 1 << 32)
                raise OSError(errno.ENOSPC, "No space left on device")
            ctypes.memmove(call.certs_address, self.host_certificates, len(self.host_certificates))
        report = with_report_data(self.report, SNP_REPORT_DATA_OFFSET, call.user_data)
        response = struct.pack("<II24x", self.status, self.report_size) + report
        ctypes.memmove(resp_data, response.ljust(sevguest.RESPONSE_SIZE, b"\0"), 4000)
        return 0


@dataclass
class FakeTdxGuest:
    """The tdx-guest driver, answering with a real TDREPORT carrying the caller's REPORTDATA."""

    tdreport: bytes = field(default_factory=tdreport)
    error: OSError | None = None
    calls: list[tuple[int, bytes]] = field(default_factory=list)

    def __call__(self, descriptor: int, request: int, argument: bytearray) -> int:
        self.calls.append((request, bytes(argument)))
        if self.error is not None:
            raise self.error
        report_data = bytes(argument[:64])
        argument[64:] = with_report_data(
            self.tdreport, tdxguest.TDREPORT_REPORT_DATA_OFFSET, report_data
        )
        return 0
