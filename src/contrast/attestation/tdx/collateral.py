"""Intel collateral for TDX: TCB info, QE identity and CRLs, loaded and checked.

The JSON documents are Intel PCS response bodies, `{"tcbInfo": {…}, "signature": "<hex r‖s>"}`
and `{"enclaveIdentity": {…}, "signature": …}`. The signature is ECDSA P-256/SHA-256 by the TCB
Signing certificate over the exact bytes of the inner value as they appear in the file, so the
value's raw span is cut out of the text, never re-serialised. The dcap-qvl bundle form (signed
text and signature as separate strings, CRLs as hex) is accepted too, as are DER/PEM CRLs and PEM
issuer chains; `load_collateral` tells them apart by content.

Reason codes: `bad_tcb_info_signature`, `bad_qe_identity_signature`, `tcb_info_expired` /
`tcb_info_not_yet_valid`, `qe_identity_expired` / `qe_identity_not_yet_valid`,
`pck_crl_expired`, `root_ca_crl_expired`, `certificate_revoked`, `fmspc_mismatch`,
`pce_id_mismatch`, `tdx_module_mismatch`, `qe_identity_mismatch`, `malformed_collateral`.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from contrast.attestation.certificates import (
    check_not_revoked,
    load_certificates,
    load_crl,
    parse_time,
    verify_crl,
    verify_ecdsa,
)
from contrast.attestation.errors import (
    AttestationError,
    MalformedEvidence,
    Reason,
    VerificationFailed,
)
from contrast.attestation.memo import IdentityMemo
from contrast.attestation.tdx.pck import PckExtension
from contrast.attestation.tdx.quote import Quote
from contrast.attestation.tdx.tcbstatus import (
    TcbEvaluation,
    TcbStatus,
    evaluate,
    module_identity_id,
)
from contrast.attestation.tdx.trust import IntelRootStore

TCB_INFO_ID = "TDX"
TCB_INFO_VERSION = 3
QE_IDENTITY_ID = "TD_QE"
SGX_COMPONENTS = 16
TDX_COMPONENTS = 16
SIGNATURE_SIZE = 64

_T = TypeVar("_T")
# Signatures already checked: collateral is reused for many quotes, its signatures need checking
# once. Keyed by content (documents) or by the object held in the entry (CRLs).
_MEMO_SIZE = 64
_memo_lock = threading.Lock()
_verified_documents: OrderedDict[bytes, x509.Certificate] = OrderedDict()
_crl_issuers: IdentityMemo[bytes] = IdentityMemo(_MEMO_SIZE)
_subjects: IdentityMemo[bytes] = IdentityMemo(_MEMO_SIZE)
_verified_crls: IdentityMemo[bool] = IdentityMemo(_MEMO_SIZE)
_HEX = re.compile(rb"[0-9a-fA-F\s]+")


def _malformed(message: str) -> MalformedEvidence:
    return MalformedEvidence(
        Reason.MALFORMED_COLLATERAL,
        message,
        hint="pass Intel PCS responses unchanged (TCB info, QE identity, CRLs, issuer chains)",
    )


# Reading JSON strictly.


def _field(obj: dict[str, Any], key: str, kind: type[_T], what: str) -> _T:
    value = obj.get(key)
    # bool is an int in Python, but never a valid SVN or version.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _malformed(f"{what}: field {key!r} is missing or not a {kind.__name__}")
    return value


def _hex(obj: dict[str, Any], key: str, what: str, size: int | None = None) -> bytes:
    text = _field(obj, key, str, what)
    try:
        value = bytes.fromhex(text)
    except ValueError:
        raise _malformed(f"{what}: field {key!r} is not hex") from None
    if size is not None and len(value) != size:
        raise _malformed(f"{what}: field {key!r} must be {size} bytes, got {len(value)}")
    return value


def _time(obj: dict[str, Any], key: str, what: str) -> datetime:
    try:
        return parse_time(_field(obj, key, str, what))
    except ValueError:
        raise _malformed(f"{what}: field {key!r} is not an ISO 8601 time") from None


def _status(obj: dict[str, Any], what: str) -> TcbStatus:
    text = _field(obj, "tcbStatus", str, what)
    try:
        return TcbStatus(text)
    except ValueError:
        raise _malformed(f"{what}: unknown tcbStatus {text!r}") from None


def _advisories(obj: dict[str, Any], what: str) -> tuple[str, ...]:
    value = obj.get("advisoryIDs", [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _malformed(f"{what}: advisoryIDs must be a list of strings")
    return tuple(value)


def _objects(obj: dict[str, Any], key: str, what: str) -> list[dict[str, Any]]:
    value = _field(obj, key, list, what)
    if not all(isinstance(item, dict) for item in value):
        raise _malformed(f"{what}: {key} must be a list of objects")
    return value


def _svns(items: Any, count: int, what: str) -> tuple[int, ...]:
    if not isinstance(items, list) or len(items) != count:
        raise _malformed(f"{what}: expected {count} components")
    values = []
    for item in items:
        if not isinstance(item, dict):
            raise _malformed(f"{what}: a component is not an object")
        svn = _field(item, "svn", int, what)
        if not 0 <= svn <= 0xFF:
            raise _malformed(f"{what}: component SVN {svn} is out of range")
        values.append(svn)
    return tuple(values)


def _top_level_spans(text: str, what: str) -> dict[str, tuple[int, int]]:
    """The raw [start, end) character span of each top-level member's value."""
    decoder = json.JSONDecoder()
    spans: dict[str, tuple[int, int]] = {}

    def skip(index: int) -> int:
        while index < len(text) and text[index] in " \t\r\n":
            index += 1
        return index

    index = skip(0)
    if index >= len(text) or text[index] != "{":
        raise _malformed(f"{what} is not a JSON object")
    index = skip(index + 1)
    if index < len(text) and text[index] == "}":
        return spans
    while True:
        try:
            key, index = decoder.raw_decode(text, index)
            index = skip(index)
            if not isinstance(key, str) or text[index : index + 1] != ":":
                raise ValueError("expected a member name and ':'")
            start = skip(index + 1)
            _, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError) as error:
            raise _malformed(f"{what} is not valid JSON: {error}") from None
        spans[key] = (start, end)
        index = skip(end)
        separator = text[index : index + 1]
        if separator == "}":
            if skip(index + 1) != len(text):
                raise _malformed(f"{what} has data after the JSON object")
            return spans
        if separator != ",":
            raise _malformed(f"{what} is not valid JSON: expected ',' or '}}' at {index}")
        index = skip(index + 1)


def _signature(text: str, what: str) -> bytes:
    try:
        signature = bytes.fromhex(text)
    except ValueError:
        raise _malformed(f"{what} signature is not hex") from None
    if len(signature) != SIGNATURE_SIZE:
        raise _malformed(f"{what} signature must be {SIGNATURE_SIZE} bytes (r‖s)")
    return signature


def _split_signed(document: bytes, member: str, what: str) -> tuple[bytes, bytes]:
    """(exact bytes of the `member` value, signature) of a PCS response body."""
    try:
        text = document.decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed(f"{what} is not UTF-8 text") from None
    spans = _top_level_spans(text, what)
    if member not in spans or "signature" not in spans:
        raise _malformed(f"{what} needs the members {member!r} and 'signature'")
    start, end = spans[member]
    raw_signature = json.loads(text[slice(*spans["signature"])])
    if not isinstance(raw_signature, str):
        raise _malformed(f"{what} signature is not a string")
    return text[start:end].encode("utf-8"), _signature(raw_signature, what)


def _parse_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise _malformed(f"{what} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise _malformed(f"{what} is not a JSON object")
    return value


# The documents.


@dataclass(frozen=True)
class TcbLevel:
    sgx_components: tuple[int, ...]
    pcesvn: int
    tdx_components: tuple[int, ...]
    tcb_date: datetime
    status: TcbStatus
    advisory_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class TdxModule:
    """`tdxModule` or one of `tdxModuleIdentities` (then with an `id` and TCB levels)."""

    mrsigner: bytes  # 48
    attributes: bytes  # 8
    attributes_mask: bytes  # 8
    id: str = ""
    tcb_levels: tuple[IsvSvnLevel, ...] = ()


@dataclass(frozen=True)
class IsvSvnLevel:
    """A TCB level rated by ISVSVN alone (TDX module identities, QE identity)."""

    isvsvn: int
    tcb_date: datetime
    status: TcbStatus
    advisory_ids: tuple[str, ...] = ()


def _isvsvn_levels(obj: dict[str, Any], what: str) -> tuple[IsvSvnLevel, ...]:
    levels = []
    for level in _objects(obj, "tcbLevels", what):
        tcb = _field(level, "tcb", dict, what)
        levels.append(
            IsvSvnLevel(
                _field(tcb, "isvsvn", int, what),
                _time(level, "tcbDate", what),
                _status(level, what),
                _advisories(level, what),
            )
        )
    return tuple(levels)


def _module(obj: dict[str, Any], what: str, *, identity: bool) -> TdxModule:
    return TdxModule(
        _hex(obj, "mrsigner", what, 48),
        _hex(obj, "attributes", what, 8),
        _hex(obj, "attributesMask", what, 8),
        _field(obj, "id", str, what) if identity else "",
        _isvsvn_levels(obj, what) if identity else (),
    )


@dataclass(frozen=True)
class TcbInfo:
    """TDX TCB info v3 for one FMSPC, with the exact bytes its signature covers."""

    fmspc: bytes
    pce_id: bytes
    issue_date: datetime
    next_update: datetime
    tcb_evaluation_data_number: int
    tdx_module: TdxModule | None
    tdx_module_identities: tuple[TdxModule, ...]
    tcb_levels: tuple[TcbLevel, ...]
    signed_body: bytes
    signature: bytes

    @classmethod
    def from_json(cls, document: bytes) -> TcbInfo:
        """A PCS `tcb` response body: `{"tcbInfo": {…}, "signature": "…"}`."""
        return cls.from_signed(*_split_signed(document, "tcbInfo", "TCB info"))

    @classmethod
    def from_signed(cls, body: bytes, signature: bytes) -> TcbInfo:
        what = "TCB info"
        info = _parse_object(body, what)
        if info.get("id") != TCB_INFO_ID or info.get("version") != TCB_INFO_VERSION:
            raise _malformed(
                f"TCB info is id {info.get('id')!r} version {info.get('version')!r};"
                f" expected the TDX TCB info, id {TCB_INFO_ID!r} version {TCB_INFO_VERSION}",
            )
        levels = []
        for level in _objects(info, "tcbLevels", what):
            tcb = _field(level, "tcb", dict, what)
            levels.append(
                TcbLevel(
                    _svns(tcb.get("sgxtcbcomponents"), SGX_COMPONENTS, what),
                    _field(tcb, "pcesvn", int, what),
                    _svns(tcb.get("tdxtcbcomponents"), TDX_COMPONENTS, what),
                    _time(level, "tcbDate", what),
                    _status(level, what),
                    _advisories(level, what),
                )
            )
        module = info.get("tdxModule")
        identities = info.get("tdxModuleIdentities", [])
        if module is not None and not isinstance(module, dict):
            raise _malformed("TCB info: tdxModule is not an object")
        if not isinstance(identities, list) or not all(isinstance(i, dict) for i in identities):
            raise _malformed("TCB info: tdxModuleIdentities is not a list of objects")
        return cls(
            fmspc=_hex(info, "fmspc", what, 6),
            pce_id=_hex(info, "pceId", what, 2),
            issue_date=_time(info, "issueDate", what),
            next_update=_time(info, "nextUpdate", what),
            tcb_evaluation_data_number=_field(info, "tcbEvaluationDataNumber", int, what),
            tdx_module=_module(module, what, identity=False) if module is not None else None,
            tdx_module_identities=tuple(_module(i, what, identity=True) for i in identities),
            tcb_levels=tuple(levels),
            signed_body=body,
            signature=signature,
        )


@dataclass(frozen=True)
class QeIdentity:
    """The TD_QE enclave identity: who the quoting enclave must be, and its TCB levels."""

    issue_date: datetime
    next_update: datetime
    miscselect: int
    miscselect_mask: int
    attributes: bytes  # 16
    attributes_mask: bytes  # 16
    mrsigner: bytes  # 32
    isvprodid: int
    tcb_levels: tuple[IsvSvnLevel, ...]
    tcb_evaluation_data_number: int
    signed_body: bytes
    signature: bytes

    @classmethod
    def from_json(cls, document: bytes) -> QeIdentity:
        """A PCS `qe/identity` response body: `{"enclaveIdentity": {…}, "signature": "…"}`."""
        return cls.from_signed(*_split_signed(document, "enclaveIdentity", "QE identity"))

    @classmethod
    def from_signed(cls, body: bytes, signature: bytes) -> QeIdentity:
        what = "QE identity"
        identity = _parse_object(body, what)
        if identity.get("id") != QE_IDENTITY_ID:
            raise _malformed(
                f"QE identity is for {identity.get('id')!r}; TDX needs {QE_IDENTITY_ID!r}"
                " (the TD quoting enclave)"
            )
        return cls(
            issue_date=_time(identity, "issueDate", what),
            next_update=_time(identity, "nextUpdate", what),
            miscselect=int.from_bytes(_hex(identity, "miscselect", what, 4), "big"),
            miscselect_mask=int.from_bytes(_hex(identity, "miscselectMask", what, 4), "big"),
            attributes=_hex(identity, "attributes", what, 16),
            attributes_mask=_hex(identity, "attributesMask", what, 16),
            mrsigner=_hex(identity, "mrsigner", what, 32),
            isvprodid=_field(identity, "isvprodid", int, what),
            tcb_levels=_isvsvn_levels(identity, what),
            tcb_evaluation_data_number=_field(identity, "tcbEvaluationDataNumber", int, what),
            signed_body=body,
            signature=signature,
        )


@dataclass(frozen=True)
class Collateral:
    """Everything given to check a quote's platform against Intel's current statements."""

    tcb_info: TcbInfo | None = None
    qe_identity: QeIdentity | None = None
    crls: tuple[x509.CertificateRevocationList, ...] = ()
    # Issuer chains that came with the collateral (TCB Signing, PCK CA); trusted only when the
    # root signed them.
    certificates: tuple[x509.Certificate, ...] = ()


@dataclass
class _Builder:
    tcb_info: TcbInfo | None = None
    qe_identity: QeIdentity | None = None
    crls: list[x509.CertificateRevocationList] | None = None
    certificates: list[x509.Certificate] | None = None

    def set_tcb_info(self, value: TcbInfo) -> None:
        if self.tcb_info is not None:
            raise _malformed("two TCB info documents were given; pass the one for this platform")
        self.tcb_info = value

    def set_qe_identity(self, value: QeIdentity) -> None:
        if self.qe_identity is not None:
            raise _malformed("two QE identity documents were given")
        self.qe_identity = value

    def add_crl(self, value: x509.CertificateRevocationList) -> None:
        self.crls = [*(self.crls or []), value]

    def add_certificates(self, values: Sequence[x509.Certificate]) -> None:
        self.certificates = [*(self.certificates or []), *values]

    def build(self) -> Collateral:
        return Collateral(
            self.tcb_info,
            self.qe_identity,
            tuple(self.crls or ()),
            tuple(self.certificates or ()),
        )


def load_collateral(files: Sequence[bytes]) -> Collateral:
    """Sort collateral files by what they contain (see the module docstring)."""
    builder = _Builder()
    for data in files:
        _load_one(data, builder)
    return builder.build()


def _load_one(data: bytes, builder: _Builder) -> None:
    # QGS hands items over as C strings: a trailing NUL is not part of the content.
    text = data.rstrip(b"\0").strip()
    if text.startswith(b"{"):
        _load_json(text, builder)
    elif b"-----BEGIN CERTIFICATE-----" in text:
        builder.add_certificates(_certificates(text, "collateral issuer chain"))
    elif b"-----BEGIN X509 CRL-----" in text:
        builder.add_crl(_crl(text, "CRL"))
    elif text and _HEX.fullmatch(text):
        builder.add_crl(_crl(_unhex(text, "hex CRL"), "hex CRL"))
    else:
        builder.add_crl(_crl(data, "collateral file (neither JSON, PEM nor a DER CRL)"))


def _load_json(text: bytes, builder: _Builder) -> None:
    document = _parse_object(text, "collateral JSON")
    if "tcbInfo" in document:
        builder.set_tcb_info(TcbInfo.from_json(text))
    elif "enclaveIdentity" in document:
        builder.set_qe_identity(QeIdentity.from_json(text))
    elif "tcb_info" in document or "qe_identity" in document:
        _load_bundle(document, builder)
    else:
        raise _malformed(
            "collateral JSON is neither TCB info, QE identity nor a dcap-qvl collateral bundle"
        )


def _load_bundle(bundle: dict[str, Any], builder: _Builder) -> None:
    """The dcap-qvl `QuoteCollateralV3` JSON: signed texts and signatures as strings."""
    what = "collateral bundle"
    if "tcb_info" in bundle:
        builder.set_tcb_info(
            TcbInfo.from_signed(
                _field(bundle, "tcb_info", str, what).encode("utf-8"),
                _signature(_field(bundle, "tcb_info_signature", str, what), "TCB info"),
            )
        )
    if "qe_identity" in bundle:
        builder.set_qe_identity(
            QeIdentity.from_signed(
                _field(bundle, "qe_identity", str, what).encode("utf-8"),
                _signature(_field(bundle, "qe_identity_signature", str, what), "QE identity"),
            )
        )
    for key in ("pck_crl", "root_ca_crl"):
        if key in bundle:
            text = _field(bundle, key, str, what).encode()
            builder.add_crl(_crl(_unhex(text, key), key))
    for key in ("tcb_info_issuer_chain", "qe_identity_issuer_chain", "pck_crl_issuer_chain"):
        if key in bundle:
            text = _field(bundle, key, str, what).encode()
            builder.add_certificates(_certificates(text, key))


def _unhex(text: bytes, what: str) -> bytes:
    try:
        return binascii.unhexlify(b"".join(text.split()))
    except (binascii.Error, ValueError):
        raise _malformed(f"{what} is not hex") from None


def _crl(data: bytes, what: str) -> x509.CertificateRevocationList:
    return load_crl(data, what=what)


def _certificates(data: bytes, what: str) -> list[x509.Certificate]:
    try:
        return load_certificates(data, what=what)
    except AttestationError as error:
        raise _malformed(error.message) from None


# Checking.


def check_collateral(
    collateral: Collateral,
    *,
    quote: Quote,
    pck_leaf: x509.Certificate,
    pck_intermediate: x509.Certificate,
    pck: PckExtension,
    now: datetime,
    roots: IntelRootStore,
) -> TcbEvaluation | None:
    """Authenticate the collateral, match it to the platform and rate the platform's TCB.

    Returns None when no TCB info was given (CRLs alone can still refuse the PCK).
    """
    tcb_info, qe_identity = collateral.tcb_info, collateral.qe_identity
    _authenticate(collateral, now, roots)
    _check_crls(collateral.crls, pck_leaf, pck_intermediate, now, roots)
    if tcb_info is None:
        return None
    _check_same_platform(tcb_info, pck)
    _check_tdx_module(tcb_info, quote)
    qe_report = quote.signature_data.qe_certification
    assert qe_report is not None
    if qe_identity is not None:
        _check_qe_identity(qe_identity, quote)
    return evaluate(
        tcb_info,
        sgx_components=pck.tcb.sgx_components,
        pcesvn=pck.tcb.pcesvn,
        tee_tcb_svn=quote.body.tee_tcb_svn,
        qe_identity=qe_identity,
        qe_isvsvn=qe_report.qe_report.isv_svn,
    )


def _authenticate(collateral: Collateral, now: datetime, roots: IntelRootStore) -> None:
    """Check that Intel signed the TCB info and QE identity, and that both are current.

    Their signer must chain to a trusted root at `now`; anyone else could write a TCB info that
    rates any platform up to date.
    """
    tcb_info, qe_identity = collateral.tcb_info, collateral.qe_identity
    signers: list[x509.Certificate] | None = None
    if tcb_info is not None or qe_identity is not None:
        signers = roots.tcb_signing_at(now, collateral.certificates)
        if not signers:
            raise VerificationFailed(
                Reason.CERTIFICATE_EXPIRED,
                f"no TCB Signing certificate issued by the root is valid at"
                f" {now:%Y-%m-%dT%H:%M:%SZ}",
                hint="pass the TCB info issuer chain that came with the collateral",
            )
    if tcb_info is not None:
        assert signers is not None
        _check_signature(
            tcb_info.signed_body,
            tcb_info.signature,
            signers,
            Reason.BAD_TCB_INFO_SIGNATURE,
            "TCB info",
        )
        _check_window(
            tcb_info.issue_date,
            tcb_info.next_update,
            now,
            what="TCB info",
            early=Reason.TCB_INFO_NOT_YET_VALID,
            late=Reason.TCB_INFO_EXPIRED,
        )
    if qe_identity is not None:
        assert signers is not None
        _check_signature(
            qe_identity.signed_body,
            qe_identity.signature,
            signers,
            Reason.BAD_QE_IDENTITY_SIGNATURE,
            "QE identity",
        )
        _check_window(
            qe_identity.issue_date,
            qe_identity.next_update,
            now,
            what="QE identity",
            early=Reason.QE_IDENTITY_NOT_YET_VALID,
            late=Reason.QE_IDENTITY_EXPIRED,
        )


def _check_same_platform(tcb_info: TcbInfo, pck: PckExtension) -> None:
    """Refuse a TCB info for another platform: its levels would rate the wrong hardware."""
    if tcb_info.fmspc != pck.fmspc:
        raise VerificationFailed(
            Reason.FMSPC_MISMATCH,
            f"the TCB info is for FMSPC {tcb_info.fmspc.hex()}, the platform's PCK says"
            f" {pck.fmspc.hex()}",
            hint=f"fetch the TDX TCB info for fmspc={pck.fmspc.hex()}",
        )
    if tcb_info.pce_id != pck.pce_id:
        raise VerificationFailed(
            Reason.PCE_ID_MISMATCH,
            f"the TCB info is for PCE-ID {tcb_info.pce_id.hex()}, the PCK says {pck.pce_id.hex()}",
        )


def _check_signature(
    body: bytes,
    signature: bytes,
    signers: Sequence[x509.Certificate],
    reason: Reason,
    what: str,
) -> None:
    digest = hashlib.sha256(body + signature).digest()
    with _memo_lock:
        signer = _verified_documents.get(digest)
    if signer is not None and signer in signers:
        return
    r = int.from_bytes(signature[:32], "big")
    s = int.from_bytes(signature[32:], "big")
    for signer in signers:
        key = signer.public_key()
        if (
            r > 0
            and s > 0
            and isinstance(key, ec.EllipticCurvePublicKey)
            and verify_ecdsa(key, r, s, body, hashes.SHA256())
        ):
            with _memo_lock:
                _verified_documents[digest] = signer
                while len(_verified_documents) > _MEMO_SIZE:
                    _verified_documents.popitem(last=False)
            return
    raise VerificationFailed(
        reason, f"the {what} signature does not verify with the Intel TCB Signing certificate"
    )


def _verify_crl(
    crl: x509.CertificateRevocationList,
    issuer: x509.Certificate,
    now: datetime,
    *,
    what: str,
    expired_reason: Reason,
) -> None:
    """`verify_crl`, skipping the signature for a CRL object already verified with `issuer`.

    The memo is keyed by the CRL and issuer objects (see contrast.attestation.memo); the
    validity window is checked on every call.
    """
    if _verified_crls.get(crl, issuer):
        next_update = crl.next_update_utc
        if crl.last_update_utc <= now and (next_update is None or now <= next_update):
            return
    verify_crl(crl, issuer, now, what=what, expired_reason=expired_reason)
    _verified_crls.put(True, crl, issuer)


def _check_window(
    issued: datetime,
    next_update: datetime,
    now: datetime,
    *,
    what: str,
    early: Reason,
    late: Reason,
) -> None:
    if now < issued:
        raise VerificationFailed(
            early, f"the {what} was issued at {issued:%Y-%m-%dT%H:%M:%SZ}, after the time checked"
        )
    if now > next_update:
        raise VerificationFailed(
            late,
            f"the {what} expired at {next_update:%Y-%m-%dT%H:%M:%SZ}"
            f" (checked at {now:%Y-%m-%dT%H:%M:%SZ})",
            hint=f"fetch a current {what} from Intel PCS",
        )


def _check_crls(
    crls: Sequence[x509.CertificateRevocationList],
    leaf: x509.Certificate,
    intermediate: x509.Certificate,
    now: datetime,
    roots: IntelRootStore,
) -> None:
    """The Root CA CRL must not list the PCK CA, nor the PCK CA's CRL the PCK.

    The other Intel PCK CA's CRL (the Processor CA's, when this PCK is a Platform CA one) does
    not concern this chain and is skipped. A CRL of any other issuer is refused: skipping it
    let a CRL whose issuer name was damaged pass unchecked (issue 24's differential run, where
    go-tdx-guest refused it).
    """
    for crl in crls:
        if not (
            _issued_by(crl, roots.root)
            or _issued_by(crl, intermediate)
            or _issued_by_sibling_ca(crl, intermediate)
        ):
            raise VerificationFailed(
                Reason.BAD_CRL,
                f"a CRL given with the collateral is issued by {crl.issuer.rfc4514_string()},"
                " neither the root CA nor a PCK CA of this chain",
            )
    for crl in crls:
        if _issued_by(crl, roots.root):
            _verify_crl(
                crl,
                roots.root,
                now,
                what="the Root CA CRL",
                expired_reason=Reason.ROOT_CA_CRL_EXPIRED,
            )
            check_not_revoked(crl, intermediate, what="the PCK CA")
    for crl in crls:
        if _issued_by(crl, intermediate):
            _verify_crl(
                crl, intermediate, now, what="the PCK CRL", expired_reason=Reason.PCK_CRL_EXPIRED
            )
            check_not_revoked(crl, leaf, what="the PCK certificate")


_PCK_CA_NAMES = ("Intel SGX PCK Platform CA", "Intel SGX PCK Processor CA")


def _issued_by_sibling_ca(
    crl: x509.CertificateRevocationList, intermediate: x509.Certificate
) -> bool:
    """Whether the CRL's issuer is the chain's PCK CA with Platform and Processor swapped."""

    def attributes(name: x509.Name) -> list[tuple[str, str]]:
        return [(a.oid.dotted_string, str(a.value)) for a in name]

    common_name = NameOID.COMMON_NAME.dotted_string
    sibling = []
    for oid, value in attributes(intermediate.subject):
        swapped = oid == common_name and value in _PCK_CA_NAMES
        sibling.append((oid, _PCK_CA_NAMES[1 - _PCK_CA_NAMES.index(value)] if swapped else value))
    return sibling != attributes(intermediate.subject) and attributes(crl.issuer) == sibling


def _issued_by(crl: x509.CertificateRevocationList, certificate: x509.Certificate) -> bool:
    """Whether the CRL's issuer name is the certificate's subject (names compared as DER).

    `cryptography` builds new `Name` objects on every access; the DER of both names is
    remembered (both by identity, see contrast.attestation.memo) because every quote asks
    again.
    """
    issuer = _crl_issuers.get(crl)
    if issuer is None:
        issuer = crl.issuer.public_bytes()
        _crl_issuers.put(issuer, crl)
    subject = _subjects.get(certificate)
    if subject is None:
        subject = certificate.subject.public_bytes()
        _subjects.put(subject, certificate)
    return issuer == subject


def _masked_equal(value: bytes, mask: bytes, expected: bytes) -> bool:
    return bytes(v & m for v, m in zip(value, mask, strict=True)) == expected


def _check_tdx_module(tcb_info: TcbInfo, quote: Quote) -> None:
    """MRSIGNERSEAM and SEAM_ATTRIBUTES must be those Intel lists for the module version."""
    body = quote.body
    module: TdxModule | None = tcb_info.tdx_module
    if body.tee_tcb_svn[1] > 0 and tcb_info.tdx_module_identities:
        wanted = module_identity_id(body.tee_tcb_svn)
        module = next((i for i in tcb_info.tdx_module_identities if i.id.upper() == wanted), module)
    if module is None:
        return
    if body.mr_signer_seam != module.mrsigner:
        raise VerificationFailed(
            Reason.TDX_MODULE_MISMATCH,
            f"MRSIGNERSEAM {body.mr_signer_seam.hex()} is not the TDX module signer"
            f" {module.mrsigner.hex()} the TCB info names",
        )
    if not _masked_equal(body.seam_attributes, module.attributes_mask, module.attributes):
        raise VerificationFailed(
            Reason.TDX_MODULE_MISMATCH,
            f"SEAM_ATTRIBUTES {body.seam_attributes.hex()} differ from the TCB info's"
            f" {module.attributes.hex()}",
        )


def _check_qe_identity(identity: QeIdentity, quote: Quote) -> None:
    qe = quote.signature_data.qe_certification
    assert qe is not None
    report = qe.qe_report
    checks: list[tuple[str, Callable[[], bool], str, str]] = [
        (
            "MRSIGNER",
            lambda: report.mr_signer == identity.mrsigner,
            identity.mrsigner.hex(),
            report.mr_signer.hex(),
        ),
        (
            "ISVPRODID",
            lambda: report.isv_prod_id == identity.isvprodid,
            str(identity.isvprodid),
            str(report.isv_prod_id),
        ),
        (
            "MISCSELECT",
            lambda: report.misc_select & identity.miscselect_mask == identity.miscselect,
            f"{identity.miscselect:#010x}",
            f"{report.misc_select:#010x}",
        ),
        (
            "ATTRIBUTES",
            lambda: _masked_equal(report.attributes, identity.attributes_mask, identity.attributes),
            identity.attributes.hex(),
            report.attributes.hex(),
        ),
    ]
    for name, matches, expected, actual in checks:
        if not matches():
            raise VerificationFailed(
                Reason.QE_IDENTITY_MISMATCH,
                f"the quoting enclave's {name} is {actual}, Intel's TD_QE identity says {expected}",
            )
