"""The Intel TDX quote, versions 4 and 5: byte layout only, no decisions.

Layout from Intel's DCAP headers (`sgx_quote_4.h`, `sgx_quote_5.h`), as summarised in
research/attestation.md §4: a 48-byte header, the TD report body (v4: 584 bytes at offset 48; v5:
a u16 body type and u32 body size, then the body), a u32 signature-data length, then the ECDSA
signature data. All integers are little-endian; signatures and keys are big-endian.

Parsing follows the declared lengths: bytes after the signature data (buffer padding, or text
appended on purpose in go-tdx-guest's sample) are kept in `Quote.trailing` and never read. A
declared length that runs past the end of the buffer, or nested lengths that disagree, raise
`MalformedEvidence` with `Reason.MALFORMED_QUOTE`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from contrast.attestation.errors import MalformedEvidence, Reason

# Header (§4.1).
HEADER_SIZE = 48
QUOTE_VERSION_4 = 4
QUOTE_VERSION_5 = 5
ATTESTATION_KEY_TYPE_ECDSA_P256 = 2
TEE_TYPE_TDX = 0x81
INTEL_QE_VENDOR_ID = bytes.fromhex("939a7233f79c4ca9940a0db3957f0607")

# Body (§4.2). Version 5 names the body type; version 4 always carries a TDX 1.0 body.
BODY_TYPE_SGX = 1
BODY_TYPE_TDX_1_0 = 2
BODY_TYPE_TDX_1_5 = 3
TD_REPORT_1_0_SIZE = 584
TD_REPORT_1_5_SIZE = 648
BODY_DESCRIPTOR_SIZE = 6  # v5: u16 body type, u32 body size

# Signature data (§4.3).
ECDSA_SIGNATURE_SIZE = 64
ATTESTATION_KEY_SIZE = 64
CERT_DATA_HEADER_SIZE = 6  # u16 type, u32 size
CERT_TYPE_PCK_CHAIN = 5
CERT_TYPE_QE_REPORT = 6
QE_REPORT_SIZE = 384

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")


def _malformed(message: str) -> MalformedEvidence:
    return MalformedEvidence(
        Reason.MALFORMED_QUOTE,
        message,
        hint="pass the quote exactly as the TDX guest or the QGS returned it",
    )


class _Reader:
    """Bounds-checked reads from a buffer; every overrun becomes `MalformedEvidence`."""

    def __init__(self, data: bytes, offset: int = 0) -> None:
        self.data = data
        self.offset = offset

    def take(self, size: int, what: str) -> bytes:
        end = self.offset + size
        if size < 0 or end > len(self.data):
            raise _malformed(
                f"TDX quote: {what} needs {size} bytes at offset {self.offset},"
                f" but only {len(self.data) - self.offset} remain"
            )
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def u16(self, what: str) -> int:
        value: int = _U16.unpack(self.take(2, what))[0]
        return value

    def u32(self, what: str) -> int:
        value: int = _U32.unpack(self.take(4, what))[0]
        return value

    def rest(self) -> bytes:
        chunk = self.data[self.offset :]
        self.offset = len(self.data)
        return chunk


@dataclass(frozen=True)
class QuoteHeader:
    """The 48-byte quote header. `pce_svn`/`qe_svn` are zero in every real TDX quote seen."""

    SIZE: ClassVar[int] = HEADER_SIZE

    version: int
    attestation_key_type: int
    tee_type: int
    pce_svn: int  # offset 8 (go-tdx-guest's name; DCAP calls bytes 8..11 reserved)
    qe_svn: int  # offset 10
    qe_vendor_id: bytes  # 16
    user_data: bytes  # 20

    @classmethod
    def from_bytes(cls, data: bytes) -> QuoteHeader:
        if len(data) != HEADER_SIZE:
            raise _malformed(f"TDX quote header is {HEADER_SIZE} bytes, got {len(data)}")
        version, key_type, tee_type, pce_svn, qe_svn = struct.unpack_from("<HHIHH", data)
        return cls(version, key_type, tee_type, pce_svn, qe_svn, data[12:28], data[28:48])

    def to_bytes(self) -> bytes:
        return (
            struct.pack(
                "<HHIHH",
                self.version,
                self.attestation_key_type,
                self.tee_type,
                self.pce_svn,
                self.qe_svn,
            )
            + self.qe_vendor_id
            + self.user_data
        )


# TD report fields in wire order, sizes as in the dataclass below (§4.2): TEE_TCB_SVN, MRSEAM,
# MRSIGNERSEAM, SEAM_ATTRIBUTES, TD_ATTRIBUTES, XFAM, MRTD, MRCONFIGID, MROWNER, MROWNERCONFIG,
# RTMR0..3, REPORTDATA; TDX 1.5 appends TEE_TCB_SVN2 and MRSERVICETD.
_TD_REPORT_1_0 = struct.Struct("<16s48s48s8s8s8s48s48s48s48s48s48s48s48s64s")
_TD_REPORT_1_5 = struct.Struct(_TD_REPORT_1_0.format + "16s48s")
assert _TD_REPORT_1_0.size == TD_REPORT_1_0_SIZE
assert _TD_REPORT_1_5.size == TD_REPORT_1_5_SIZE


@dataclass(frozen=True)
class TdReport:
    """The TD report body: TDX 1.0 (584 bytes) or TDX 1.5 (648 bytes, two more fields).

    Byte strings are kept as stored (little-endian where the field is a number), so
    `td_attributes.hex()` reads like the hex in Intel's tools and in expected.json.
    """

    tee_tcb_svn: bytes  # 16; [0] module minor SVN, [1] module major version, [2] SEAM patch
    mr_seam: bytes  # 48
    mr_signer_seam: bytes  # 48
    seam_attributes: bytes  # 8
    td_attributes: bytes  # 8, u64 LE; bit 0 is DEBUG
    xfam: bytes  # 8
    mr_td: bytes  # 48
    mr_config_id: bytes  # 48; Contrast/Kata: the policy hash in bytes 0..31
    mr_owner: bytes  # 48
    mr_owner_config: bytes  # 48
    rtmrs: tuple[bytes, bytes, bytes, bytes]  # 4 × 48
    report_data: bytes  # 64
    tee_tcb_svn_2: bytes | None = None  # 16, TDX 1.5 only
    mr_servicetd: bytes | None = None  # 48, TDX 1.5 only

    @property
    def body_type(self) -> int:
        return BODY_TYPE_TDX_1_0 if self.tee_tcb_svn_2 is None else BODY_TYPE_TDX_1_5

    @property
    def size(self) -> int:
        return TD_REPORT_1_0_SIZE if self.tee_tcb_svn_2 is None else TD_REPORT_1_5_SIZE

    @property
    def td_attributes_value(self) -> int:
        return int.from_bytes(self.td_attributes, "little")

    @property
    def debug(self) -> bool:
        """TUD.DEBUG (attribute bit 0): the host can read and change the TD's state."""
        return bool(self.td_attributes_value & 1)

    @classmethod
    def from_bytes(cls, data: bytes, body_type: int = BODY_TYPE_TDX_1_0) -> TdReport:
        expected = {BODY_TYPE_TDX_1_0: TD_REPORT_1_0_SIZE, BODY_TYPE_TDX_1_5: TD_REPORT_1_5_SIZE}
        if body_type not in expected:
            raise MalformedEvidence(
                Reason.UNSUPPORTED_QUOTE,
                f"TDX quote body type {body_type} is not a TD report"
                " (2 = TDX 1.0, 3 = TDX 1.5 are supported)",
            )
        if len(data) != expected[body_type]:
            raise _malformed(
                f"TD report body type {body_type} is {expected[body_type]} bytes, got {len(data)}"
            )
        is_1_5 = body_type == BODY_TYPE_TDX_1_5
        v = (_TD_REPORT_1_5 if is_1_5 else _TD_REPORT_1_0).unpack(data)
        return cls(
            tee_tcb_svn=v[0],
            mr_seam=v[1],
            mr_signer_seam=v[2],
            seam_attributes=v[3],
            td_attributes=v[4],
            xfam=v[5],
            mr_td=v[6],
            mr_config_id=v[7],
            mr_owner=v[8],
            mr_owner_config=v[9],
            rtmrs=(v[10], v[11], v[12], v[13]),
            report_data=v[14],
            tee_tcb_svn_2=v[15] if is_1_5 else None,
            mr_servicetd=v[16] if is_1_5 else None,
        )

    def to_bytes(self) -> bytes:
        return (
            self.tee_tcb_svn
            + self.mr_seam
            + self.mr_signer_seam
            + self.seam_attributes
            + self.td_attributes
            + self.xfam
            + self.mr_td
            + self.mr_config_id
            + self.mr_owner
            + self.mr_owner_config
            + b"".join(self.rtmrs)
            + self.report_data
            + (self.tee_tcb_svn_2 or b"")
            + (self.mr_servicetd or b"")
        )


@dataclass(frozen=True)
class QeReport:
    """The Quoting Enclave's SGX report body (384 bytes), signed by the PCK key (§4.4)."""

    cpu_svn: bytes  # 16
    misc_select: int  # u32
    reserved1: bytes  # 28
    attributes: bytes  # 16
    mr_enclave: bytes  # 32
    reserved2: bytes  # 32
    mr_signer: bytes  # 32
    reserved3: bytes  # 96
    isv_prod_id: int  # u16
    isv_svn: int  # u16
    reserved4: bytes  # 60
    report_data: bytes  # 64 = SHA-256(attestation key ‖ QE auth data) ‖ 32 zero bytes

    _FORMAT: ClassVar[struct.Struct] = struct.Struct("<16sI28s16s32s32s32s96sHH60s64s")

    @classmethod
    def from_bytes(cls, data: bytes) -> QeReport:
        if len(data) != QE_REPORT_SIZE:
            raise _malformed(f"QE report is {QE_REPORT_SIZE} bytes, got {len(data)}")
        return cls(*cls._FORMAT.unpack(data))

    def to_bytes(self) -> bytes:
        return self._FORMAT.pack(
            self.cpu_svn,
            self.misc_select,
            self.reserved1,
            self.attributes,
            self.mr_enclave,
            self.reserved2,
            self.mr_signer,
            self.reserved3,
            self.isv_prod_id,
            self.isv_svn,
            self.reserved4,
            self.report_data,
        )


@dataclass(frozen=True)
class CertificationData:
    """A (type, data) certification-data item; type 5 holds the PEM PCK chain."""

    type: int
    data: bytes

    @classmethod
    def read(cls, reader: _Reader, what: str) -> CertificationData:
        kind = reader.u16(f"{what} type")
        size = reader.u32(f"{what} size")
        return cls(kind, reader.take(size, f"{what} (type {kind})"))

    def to_bytes(self) -> bytes:
        return _U16.pack(self.type) + _U32.pack(len(self.data)) + self.data

    @property
    def pck_chain_pem(self) -> bytes | None:
        return self.data if self.type == CERT_TYPE_PCK_CHAIN else None


@dataclass(frozen=True)
class QeReportCertificationData:
    """Certification data type 6: the QE report, its PCK signature, and the PCK chain."""

    qe_report: QeReport
    qe_report_signature: bytes  # 64, r‖s big-endian, by the PCK key
    qe_auth_data: bytes
    certification: CertificationData  # type 5 in every real quote

    @classmethod
    def from_bytes(cls, data: bytes) -> QeReportCertificationData:
        reader = _Reader(data)
        qe_report = QeReport.from_bytes(reader.take(QE_REPORT_SIZE, "QE report"))
        signature = reader.take(ECDSA_SIGNATURE_SIZE, "QE report signature")
        auth_size = reader.u16("QE authentication data size")
        auth_data = reader.take(auth_size, "QE authentication data")
        certification = CertificationData.read(reader, "inner certification data")
        if reader.offset != len(data):
            raise _malformed(
                f"QE report certification data declares {len(data)} bytes but its parts end"
                f" at {reader.offset}"
            )
        return cls(qe_report, signature, auth_data, certification)

    def to_bytes(self) -> bytes:
        return (
            self.qe_report.to_bytes()
            + self.qe_report_signature
            + _U16.pack(len(self.qe_auth_data))
            + self.qe_auth_data
            + self.certification.to_bytes()
        )


@dataclass(frozen=True)
class QuoteSignatureData:
    """The ECDSA-256 quote signature data (DCAP's "QuoteV4AuthData")."""

    signature: bytes  # 64, r‖s big-endian, by the attestation key over header ‖ body
    attestation_key: bytes  # 64, raw P-256 X‖Y
    certification: CertificationData
    # Type 6 parsed; None when the top-level certification data is another type (e.g. 5).
    qe_certification: QeReportCertificationData | None

    @classmethod
    def from_bytes(cls, data: bytes) -> QuoteSignatureData:
        reader = _Reader(data)
        signature = reader.take(ECDSA_SIGNATURE_SIZE, "quote signature")
        key = reader.take(ATTESTATION_KEY_SIZE, "attestation key")
        certification = CertificationData.read(reader, "certification data")
        if reader.offset != len(data):
            raise _malformed(
                f"signature data declares {len(data)} bytes but its parts end at {reader.offset}"
            )
        qe = (
            QeReportCertificationData.from_bytes(certification.data)
            if certification.type == CERT_TYPE_QE_REPORT
            else None
        )
        return cls(signature, key, certification, qe)

    def to_bytes(self) -> bytes:
        return self.signature + self.attestation_key + self.certification.to_bytes()

    @property
    def pck_chain_pem(self) -> bytes | None:
        """The PEM PCK chain, from type 6 → type 5 or from a top-level type 5."""
        if self.qe_certification is not None:
            return self.qe_certification.certification.pck_chain_pem
        return self.certification.pck_chain_pem


@dataclass(frozen=True)
class Quote:
    """A TDX quote v4 or v5. `to_bytes()` reproduces the input, trailing bytes included."""

    header: QuoteHeader
    body: TdReport
    signature_data: QuoteSignatureData
    trailing: bytes = b""
    # v5 only: the body type as declared (equal to body.body_type).
    declared_body_type: int | None = None

    @classmethod
    def from_bytes(cls, data: bytes) -> Quote:
        reader = _Reader(data)
        header = QuoteHeader.from_bytes(reader.take(HEADER_SIZE, "header"))
        if header.version not in (QUOTE_VERSION_4, QUOTE_VERSION_5):
            raise MalformedEvidence(
                Reason.UNSUPPORTED_QUOTE,
                f"TDX quote version {header.version} is not supported (4 and 5 are)",
            )
        if header.tee_type != TEE_TYPE_TDX:
            raise MalformedEvidence(
                Reason.UNSUPPORTED_QUOTE,
                f"quote TEE type {header.tee_type:#x} is not TDX ({TEE_TYPE_TDX:#x});"
                " SGX enclave quotes are not supported",
            )
        declared: int | None = None
        if header.version == QUOTE_VERSION_4:
            body_type, body_size = BODY_TYPE_TDX_1_0, TD_REPORT_1_0_SIZE
        else:
            body_type = declared = reader.u16("body type")
            body_size = reader.u32("body size")
        body = TdReport.from_bytes(reader.take(body_size, "TD report body"), body_type)
        signature_size = reader.u32("signature data length")
        signature_data = QuoteSignatureData.from_bytes(
            reader.take(signature_size, "signature data")
        )
        return cls(header, body, signature_data, reader.rest(), declared)

    @property
    def signed_bytes(self) -> bytes:
        """Header ‖ (v5: body descriptor ‖) body: what the attestation key signs."""
        descriptor = b""
        if self.header.version == QUOTE_VERSION_5:
            body_type = self.declared_body_type or self.body.body_type
            descriptor = _U16.pack(body_type) + _U32.pack(self.body.size)
        return self.header.to_bytes() + descriptor + self.body.to_bytes()

    def to_bytes(self) -> bytes:
        signature_data = self.signature_data.to_bytes()
        return self.signed_bytes + _U32.pack(len(signature_data)) + signature_data + self.trailing
