"""An emulated Intel TDX: quotes v4 in exactly the real format, signed by a local hierarchy.

On first use the state directory gets (under `tdx/`) a P-256 "Contrast Emulated SGX Root CA", a
PCK Platform CA, a PCK certificate carrying the SGX extension (FMSPC, PCE-ID, TCB components), a
quoting-enclave attestation key and a TCB Signing certificate; keys are owner-only files. The
hierarchy is built in a temporary directory and renamed into place, so a crash or a concurrent
first use leaves either no hierarchy or one complete one.

`issue` builds what the TDX module and the quoting enclave would: a TD report body, a QE report
whose REPORTDATA binds the attestation key, signed by the PCK key, and the quote signature over
header ‖ body (research/attestation.md §6). `tdx/verify.py` verifies these quotes unchanged when
given `roots`; against Intel's roots they fail with `untrusted_pck`, and `roots.genuine` is False
so reference values for real hardware refuse them even if their measurements were copied.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from contrast.attestation.certificates import load_certificate
from contrast.attestation.emulated.state import read_private_key, read_state, write_private_key
from contrast.attestation.errors import AttestationError, Reason
from contrast.attestation.tdx.collateral import Collateral, load_collateral
from contrast.attestation.tdx.pck import SGX_EXTENSION_OID, PckExtension, PckTcb
from contrast.attestation.tdx.quote import (
    ATTESTATION_KEY_TYPE_ECDSA_P256,
    CERT_TYPE_PCK_CHAIN,
    CERT_TYPE_QE_REPORT,
    INTEL_QE_VENDOR_ID,
    QUOTE_VERSION_4,
    TEE_TYPE_TDX,
    CertificationData,
    QeReport,
    QeReportCertificationData,
    Quote,
    QuoteHeader,
    QuoteSignatureData,
    TdReport,
)
from contrast.attestation.tdx.trust import IntelRootStore
from contrast.files import write_atomically

FMSPC = bytes.fromhex("c0de00000000")  # not an Intel FMSPC, so never confused with one
PCE_ID = bytes(2)
SGX_COMPONENTS = (3, 3, 2, 2, 4, 1, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0)
PCESVN = 11
TEE_TCB_SVN = bytes([6, 1, 3]) + bytes(13)  # TDX module 1.x, minor SVN 6, SEAM patch 3
QE_ISVSVN = 4
QE_ISVPRODID = 2
QE_ATTRIBUTES = bytes.fromhex("1500000000000000e700000000000000")
QE_MRSIGNER = hashlib.sha256(b"contrast emulated TDX quoting enclave signer").digest()
QE_MRENCLAVE = hashlib.sha256(b"contrast emulated TDX quoting enclave").digest()
MR_SEAM = hashlib.sha384(b"contrast emulated TDX module").digest()
DEFAULT_MR_TD = hashlib.sha384(b"contrast emulated TD").digest()
DEFAULT_XFAM = bytes.fromhex("e702060000000000")
NON_DEBUG_TD_ATTRIBUTES = (1 << 28).to_bytes(8, "little")  # SEPT_VE_DISABLE only
REPORT_DATA_SIZE = 64
MR_CONFIG_ID_SIZE = 48
MEASUREMENT_SIZE = 48
TD_ATTRIBUTES_SIZE = 8

_NOT_BEFORE = datetime(2020, 1, 1, tzinfo=UTC)
_NOT_AFTER = datetime(2100, 1, 1, tzinfo=UTC)
_COLLATERAL_VALIDITY = timedelta(days=30)
_COLLATERAL_BACKDATE = timedelta(hours=1)
_KEYS = ("root_ca", "pck_ca", "pck", "attestation", "tcb_signing")


@dataclass(frozen=True)
class _Hierarchy:
    root: x509.Certificate
    pck_ca: x509.Certificate
    pck: x509.Certificate
    tcb_signing: x509.Certificate
    root_key: ec.EllipticCurvePrivateKey
    pck_ca_key: ec.EllipticCurvePrivateKey
    pck_key: ec.EllipticCurvePrivateKey
    attestation_key: ec.EllipticCurvePrivateKey
    tcb_signing_key: ec.EllipticCurvePrivateKey

    @property
    def chain_pem(self) -> bytes:
        pem = b"".join(
            c.public_bytes(serialization.Encoding.PEM) for c in (self.pck, self.pck_ca, self.root)
        )
        return pem + b"\0"  # as real quotes often carry it

    @property
    def attestation_public(self) -> bytes:
        return self.attestation_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )[1:]


def load_roots(state_dir: Path) -> IntelRootStore | None:
    """The roots an emulated TDX TEE's quotes chain to, read from `state_dir`; None if absent.

    For verifiers: only certificates are read (the chain's last one is the root) and nothing
    is ever created, so a verifier can be given the roots without the private keys.
    """
    directory = Path(state_dir) / "tdx"
    chain_file, tcb_signing_file = directory / "chain.pem", directory / "tcb_signing.pem"
    if not (chain_file.is_file() and tcb_signing_file.is_file()):
        return None
    try:
        *_, root = x509.load_pem_x509_certificates(read_state(chain_file))
    except ValueError:
        raise _issuer_error(f"{chain_file} holds no PEM certificates") from None
    tcb_signing = load_certificate(read_state(tcb_signing_file), what="emulated TCB signing")
    return IntelRootStore(root, (tcb_signing,), genuine=False)


class EmulatedTdx:
    """The emulated TDX guest and quoting enclave, with its hierarchy in `state_dir/tdx`."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._directory = state_dir / "tdx"
        self._hierarchy: _Hierarchy | None = None
        self._lock = threading.Lock()

    @property
    def roots(self) -> IntelRootStore:
        """What a verifier must trust to accept this TEE's quotes (never `genuine`)."""
        hierarchy = self._load()
        return IntelRootStore(hierarchy.root, (hierarchy.tcb_signing,), genuine=False)

    @property
    def root_certificate(self) -> x509.Certificate:
        return self._load().root

    def issue(
        self,
        report_data: bytes,
        mr_config_id: bytes = bytes(MR_CONFIG_ID_SIZE),
        *,
        mr_td: bytes | None = None,
        rtmrs: tuple[bytes, bytes, bytes, bytes] | None = None,
        td_attributes: bytes = NON_DEBUG_TD_ATTRIBUTES,
    ) -> bytes:
        """A v4 quote over a TD report with these values (type 6 certification data)."""
        _check_issue_inputs(report_data, mr_config_id, td_attributes, mr_td, rtmrs)
        hierarchy = self._load()
        header = QuoteHeader(
            QUOTE_VERSION_4,
            ATTESTATION_KEY_TYPE_ECDSA_P256,
            TEE_TYPE_TDX,
            0,
            0,
            INTEL_QE_VENDOR_ID,
            bytes(20),
        )
        body = TdReport(
            tee_tcb_svn=TEE_TCB_SVN,
            mr_seam=MR_SEAM,
            mr_signer_seam=bytes(MEASUREMENT_SIZE),
            seam_attributes=bytes(8),
            td_attributes=td_attributes,
            xfam=DEFAULT_XFAM,
            mr_td=mr_td if mr_td is not None else DEFAULT_MR_TD,
            mr_config_id=mr_config_id,
            mr_owner=bytes(MEASUREMENT_SIZE),
            mr_owner_config=bytes(MEASUREMENT_SIZE),
            rtmrs=rtmrs if rtmrs is not None else _default_rtmrs(),
            report_data=report_data,
        )
        return _signed_quote(hierarchy, header, body)

    def collateral_files(self, *, now: datetime) -> list[bytes]:
        """TCB info, QE identity (PCS JSON), PCK and root CRLs, valid around `now` for 30 days.

        Like Intel's, the collateral is issued before it is used: an hour back, so a verifier
        whose clock is a little behind this one's still accepts it.
        """
        hierarchy = self._load()
        until = now + _COLLATERAL_VALIDITY
        now = now - _COLLATERAL_BACKDATE
        tcb_info = {
            "id": "TDX",
            "version": 3,
            "issueDate": _iso(now),
            "nextUpdate": _iso(until),
            "fmspc": FMSPC.hex(),
            "pceId": PCE_ID.hex(),
            "tcbType": 0,
            "tcbEvaluationDataNumber": 1,
            "tdxModule": _module_json(),
            "tdxModuleIdentities": [
                {
                    "id": f"TDX_{TEE_TCB_SVN[1]:02X}",
                    **_module_json(),
                    "tcbLevels": [_isvsvn_level(TEE_TCB_SVN[0], now)],
                }
            ],
            "tcbLevels": [
                {
                    "tcb": {
                        "sgxtcbcomponents": [{"svn": svn} for svn in SGX_COMPONENTS],
                        "pcesvn": PCESVN,
                        "tdxtcbcomponents": [{"svn": svn} for svn in TEE_TCB_SVN],
                    },
                    "tcbDate": _iso(now),
                    "tcbStatus": "UpToDate",
                }
            ],
        }
        qe_identity = {
            "id": "TD_QE",
            "version": 2,
            "issueDate": _iso(now),
            "nextUpdate": _iso(until),
            "tcbEvaluationDataNumber": 1,
            "miscselect": "00000000",
            "miscselectMask": "FFFFFFFF",
            "attributes": "11000000000000000000000000000000",
            "attributesMask": "FBFFFFFFFFFFFFFF0000000000000000",
            "mrsigner": QE_MRSIGNER.hex().upper(),
            "isvprodid": QE_ISVPRODID,
            "tcbLevels": [_isvsvn_level(QE_ISVSVN, now)],
        }
        key = hierarchy.tcb_signing_key
        return [
            _signed_document("tcbInfo", tcb_info, key),
            _signed_document("enclaveIdentity", qe_identity, key),
            _crl(hierarchy.pck_ca, hierarchy.pck_ca_key, now, until),
            _crl(hierarchy.root, hierarchy.root_key, now, until),
        ]

    def collateral(self, *, now: datetime) -> Collateral:
        return load_collateral(self.collateral_files(now=now))

    # State.

    def _load(self) -> _Hierarchy:
        with self._lock:
            if self._hierarchy is None:
                if not (self._directory / "chain.pem").is_file():
                    self._generate()
                self._hierarchy = self._read()
            return self._hierarchy

    def _read(self) -> _Hierarchy:
        directory = self._directory
        keys = {}
        for name in _KEYS:
            key = read_private_key(directory / f"{name}.key")
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise _issuer_error(f"{directory / name}.key is not a P-256 key")
            keys[name] = key
        chain = x509.load_pem_x509_certificates(read_state(directory / "chain.pem"))
        tcb_signing = load_certificate(read_state(directory / "tcb_signing.pem"))
        pck, pck_ca, root = chain
        return _Hierarchy(
            root,
            pck_ca,
            pck,
            tcb_signing,
            keys["root_ca"],
            keys["pck_ca"],
            keys["pck"],
            keys["attestation"],
            keys["tcb_signing"],
        )

    def _generate(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=self.state_dir, prefix=".tdx-"))
        try:
            keys = {name: ec.generate_private_key(ec.SECP256R1()) for name in _KEYS}
            root_name = _name("Contrast Emulated SGX Root CA")
            root = _certificate(root_name, root_name, keys["root_ca"], keys["root_ca"], ca=1)
            pck_ca_name = _name("Contrast Emulated SGX PCK Platform CA")
            pck_ca = _certificate(pck_ca_name, root_name, keys["pck_ca"], keys["root_ca"], ca=0)
            extension = PckExtension(
                ppid=os.urandom(16),
                tcb=PckTcb(SGX_COMPONENTS, PCESVN, bytes(SGX_COMPONENTS)),
                pce_id=PCE_ID,
                fmspc=FMSPC,
                sgx_type=1,
                platform_instance_id=os.urandom(16),
            )
            pck = _certificate(
                _name("Contrast Emulated SGX PCK Certificate"),
                pck_ca_name,
                keys["pck"],
                keys["pck_ca"],
                ca=None,
                sgx=extension,
            )
            tcb_signing = _certificate(
                _name("Contrast Emulated SGX TCB Signing"),
                root_name,
                keys["tcb_signing"],
                keys["root_ca"],
                ca=None,
            )
            for name, key in keys.items():
                write_private_key(staging / f"{name}.key", key)
            pem = serialization.Encoding.PEM
            write_atomically(staging / "tcb_signing.pem", tcb_signing.public_bytes(pem))
            chain = b"".join(c.public_bytes(pem) for c in (pck, pck_ca, root))
            write_atomically(staging / "chain.pem", chain)
            try:
                staging.rename(self._directory)
            except OSError:
                # Another process finished first (or a stale partial directory is in the way).
                if (self._directory / "chain.pem").is_file():
                    return
                shutil.rmtree(self._directory, ignore_errors=True)
                staging.rename(self._directory)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)


def _check_issue_inputs(
    report_data: bytes,
    mr_config_id: bytes,
    td_attributes: bytes,
    mr_td: bytes | None,
    rtmrs: tuple[bytes, ...] | None,
) -> None:
    """Refuse fields of the wrong size before anything is signed: a quote would only pack them."""
    _check_size(report_data, REPORT_DATA_SIZE, "report data")
    _check_size(mr_config_id, MR_CONFIG_ID_SIZE, "MRCONFIGID")
    _check_size(td_attributes, TD_ATTRIBUTES_SIZE, "TD attributes")
    if mr_td is not None:
        _check_size(mr_td, MEASUREMENT_SIZE, "MRTD")
    if rtmrs is not None:
        if len(rtmrs) != 4:
            raise _issuer_error(f"expected 4 RTMRs, got {len(rtmrs)}")
        for rtmr in rtmrs:
            _check_size(rtmr, MEASUREMENT_SIZE, "an RTMR")


def _qe_certification(hierarchy: _Hierarchy, auth_data: bytes) -> QeReportCertificationData:
    """The quoting enclave's report, binding the attestation key, signed by the PCK key.

    This is what ties the quote's signing key to the PCK certificate chain a verifier checks.
    """
    qe_report = QeReport(
        cpu_svn=bytes(SGX_COMPONENTS),
        misc_select=0,
        reserved1=bytes(28),
        attributes=QE_ATTRIBUTES,
        mr_enclave=QE_MRENCLAVE,
        reserved2=bytes(32),
        mr_signer=QE_MRSIGNER,
        reserved3=bytes(96),
        isv_prod_id=QE_ISVPRODID,
        isv_svn=QE_ISVSVN,
        reserved4=bytes(60),
        report_data=hashlib.sha256(hierarchy.attestation_public + auth_data).digest() + bytes(32),
    )
    return QeReportCertificationData(
        qe_report,
        _sign(hierarchy.pck_key, qe_report.to_bytes()),
        auth_data,
        CertificationData(CERT_TYPE_PCK_CHAIN, hierarchy.chain_pem),
    )


def _signed_quote(hierarchy: _Hierarchy, header: QuoteHeader, body: TdReport) -> bytes:
    """The quote's bytes, signed by the attestation key over its header and TD report."""
    auth_data = bytes(range(32))
    attestation_key = hierarchy.attestation_public
    qe_certification = _qe_certification(hierarchy, auth_data)
    unsigned = Quote(
        header,
        body,
        QuoteSignatureData(
            bytes(64),
            attestation_key,
            CertificationData(CERT_TYPE_QE_REPORT, qe_certification.to_bytes()),
            qe_certification,
        ),
    )
    signature = _sign(hierarchy.attestation_key, unsigned.signed_bytes)
    signed = Quote(
        header,
        body,
        QuoteSignatureData(
            signature,
            attestation_key,
            unsigned.signature_data.certification,
            qe_certification,
        ),
    )
    return signed.to_bytes()


def _issuer_error(message: str) -> AttestationError:
    return AttestationError(Reason.ISSUER_FAILED, f"emulated TDX: {message}")


def _check_size(value: bytes, size: int, what: str) -> None:
    if not isinstance(value, bytes) or len(value) != size:
        raise _issuer_error(f"{what} must be {size} bytes")


def _default_rtmrs() -> tuple[bytes, bytes, bytes, bytes]:
    r0, r1, r2 = (hashlib.sha384(f"contrast emulated RTMR{i}".encode()).digest() for i in range(3))
    return (r0, r1, r2, bytes(MEASUREMENT_SIZE))


def _sign(key: ec.EllipticCurvePrivateKey, data: bytes) -> bytes:
    r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Contrast emulated TEE (not Intel)"),
        ]
    )


def _certificate(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: int | None,
    sgx: PckExtension | None = None,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOT_BEFORE)
        .not_valid_after(_NOT_AFTER)
        .add_extension(
            x509.BasicConstraints(ca=ca is not None, path_length=ca),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if sgx is not None:
        builder = builder.add_extension(
            x509.UnrecognizedExtension(x509.ObjectIdentifier(SGX_EXTENSION_OID), sgx.to_der()),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _crl(
    issuer: x509.Certificate,
    key: ec.EllipticCurvePrivateKey,
    now: datetime,
    until: datetime,
) -> bytes:
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(issuer.subject)
        .last_update(now)
        .next_update(until)
        .sign(key, hashes.SHA256())
    )
    return crl.public_bytes(serialization.Encoding.DER)


def _module_json() -> dict[str, str]:
    return {
        "mrsigner": bytes(MEASUREMENT_SIZE).hex(),
        "attributes": "0000000000000000",
        "attributesMask": "FFFFFFFFFFFFFFFF",
    }


def _isvsvn_level(isvsvn: int, now: datetime) -> dict[str, object]:
    return {"tcb": {"isvsvn": isvsvn}, "tcbDate": _iso(now), "tcbStatus": "UpToDate"}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _signed_document(
    member: str, value: dict[str, object], key: ec.EllipticCurvePrivateKey
) -> bytes:
    """A PCS-style body: the signature covers exactly the bytes of the member's value."""
    body = json.dumps(value, separators=(",", ":"))
    signature = _sign(key, body.encode()).hex()
    return f'{{"{member}":{body},"signature":"{signature}"}}'.encode()
