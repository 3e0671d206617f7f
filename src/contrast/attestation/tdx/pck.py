"""The SGX extension of a PCK certificate: the platform's FMSPC, PCE-ID and TCB (§4.5).

The extension (OID 1.2.840.113741.1.13.1) is a SEQUENCE of SEQUENCE { OID, value }; the TCB entry
nests sixteen SGX component SVNs, the PCESVN and the CPUSVN the same way. Intel's TCB info is
matched against these values, so they must come from the certificate the chain check accepted.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography import x509

from contrast.attestation.errors import MalformedEvidence, Reason
from contrast.attestation.tdx import der

SGX_EXTENSION_OID = "1.2.840.113741.1.13.1"
_PPID = f"{SGX_EXTENSION_OID}.1"
_TCB = f"{SGX_EXTENSION_OID}.2"
_PCE_ID = f"{SGX_EXTENSION_OID}.3"
_FMSPC = f"{SGX_EXTENSION_OID}.4"
_SGX_TYPE = f"{SGX_EXTENSION_OID}.5"
_PLATFORM_INSTANCE_ID = f"{SGX_EXTENSION_OID}.6"
_CONFIGURATION = f"{SGX_EXTENSION_OID}.7"
_PCESVN = f"{_TCB}.17"
_CPUSVN = f"{_TCB}.18"
_DYNAMIC_PLATFORM = f"{_CONFIGURATION}.1"
_CACHED_KEYS = f"{_CONFIGURATION}.2"
_SMT_ENABLED = f"{_CONFIGURATION}.3"

SGX_TCB_COMPONENTS = 16
FMSPC_SIZE = 6
PCE_ID_SIZE = 2
CPUSVN_SIZE = 16


def _malformed(message: str) -> MalformedEvidence:
    return MalformedEvidence(Reason.MALFORMED_CERTIFICATE, f"SGX PCK extension: {message}")


@dataclass(frozen=True)
class PckTcb:
    sgx_components: tuple[int, ...]  # 16 SVNs, each 0..255
    pcesvn: int
    cpusvn: bytes  # 16


@dataclass(frozen=True)
class PlatformConfiguration:
    dynamic_platform: bool | None
    cached_keys: bool | None
    smt_enabled: bool | None

    def to_der(self) -> bytes:
        flags = (
            (_DYNAMIC_PLATFORM, self.dynamic_platform),
            (_CACHED_KEYS, self.cached_keys),
            (_SMT_ENABLED, self.smt_enabled),
        )
        return der.encode_sequence(
            *(
                _pair(oid, der.encode(der.TAG_BOOLEAN, b"\xff" if value else b"\x00"))
                for oid, value in flags
                if value is not None
            )
        )


@dataclass(frozen=True)
class PckExtension:
    """What Intel states about the platform in its PCK certificate."""

    ppid: bytes
    tcb: PckTcb
    pce_id: bytes  # 2
    fmspc: bytes  # 6
    sgx_type: int  # 0 Standard, 1 Scalable, 2 Scalable with integrity
    platform_instance_id: bytes | None = None  # PCK Platform CA certificates only
    configuration: PlatformConfiguration | None = None

    @classmethod
    def from_der(cls, data: bytes) -> PckExtension:
        entries = _entries(der.read_single(data))
        for required in (_PPID, _TCB, _PCE_ID, _FMSPC, _SGX_TYPE):
            if required not in entries:
                raise _malformed(f"entry {required} is missing")
        fmspc = entries[_FMSPC].octets()
        pce_id = entries[_PCE_ID].octets()
        if len(fmspc) != FMSPC_SIZE or len(pce_id) != PCE_ID_SIZE:
            raise _malformed(f"FMSPC must be {FMSPC_SIZE} and PCE-ID {PCE_ID_SIZE} bytes")
        piid = entries.get(_PLATFORM_INSTANCE_ID)
        configuration = entries.get(_CONFIGURATION)
        return cls(
            ppid=entries[_PPID].octets(),
            tcb=_tcb(entries[_TCB]),
            pce_id=pce_id,
            fmspc=fmspc,
            sgx_type=entries[_SGX_TYPE].integer(),
            platform_instance_id=piid.octets() if piid is not None else None,
            configuration=_configuration(configuration) if configuration is not None else None,
        )

    def to_der(self) -> bytes:
        """The extension value as Intel encodes it (used by the emulated TEE)."""
        tcb = [
            _pair(f"{_TCB}.{index + 1}", der.encode_integer(svn))
            for index, svn in enumerate(self.tcb.sgx_components)
        ]
        tcb.append(_pair(_PCESVN, der.encode_integer(self.tcb.pcesvn)))
        tcb.append(_pair(_CPUSVN, der.encode(der.TAG_OCTET_STRING, self.tcb.cpusvn)))
        entries = [
            _pair(_PPID, der.encode(der.TAG_OCTET_STRING, self.ppid)),
            _pair(_TCB, der.encode_sequence(*tcb)),
            _pair(_PCE_ID, der.encode(der.TAG_OCTET_STRING, self.pce_id)),
            _pair(_FMSPC, der.encode(der.TAG_OCTET_STRING, self.fmspc)),
            _pair(_SGX_TYPE, der.encode_integer(self.sgx_type, tag=der.TAG_ENUMERATED)),
        ]
        if self.platform_instance_id is not None:
            entries.append(
                _pair(
                    _PLATFORM_INSTANCE_ID,
                    der.encode(der.TAG_OCTET_STRING, self.platform_instance_id),
                )
            )
        if self.configuration is not None:
            entries.append(_pair(_CONFIGURATION, self.configuration.to_der()))
        return der.encode_sequence(*entries)


def read_pck_extension(certificate: x509.Certificate) -> PckExtension:
    """The SGX extension of a PCK certificate; `MalformedEvidence` when absent or garbled."""
    try:
        extension = certificate.extensions.get_extension_for_oid(
            x509.ObjectIdentifier(SGX_EXTENSION_OID)
        )
    except x509.ExtensionNotFound:
        raise _malformed("the PCK certificate has no SGX extension") from None
    except ValueError as error:  # a duplicate or undecodable extension
        raise _malformed(f"cannot read the PCK certificate's extensions: {error}") from None
    value = extension.value
    if not isinstance(value, x509.UnrecognizedExtension):
        raise _malformed("unexpected extension type")
    return PckExtension.from_der(value.value)


def _pair(oid: str, value: bytes) -> bytes:
    return der.encode_sequence(der.encode_oid(oid), value)


def _entries(sequence: der.Element) -> dict[str, der.Element]:
    """SEQUENCE OF SEQUENCE { OID, value } as a mapping; duplicates are refused."""
    entries: dict[str, der.Element] = {}
    for item in sequence.children():
        parts = item.children()
        if len(parts) != 2:
            raise _malformed(f"an entry has {len(parts)} parts, expected OID and value")
        oid = parts[0].oid()
        if oid in entries:
            raise _malformed(f"entry {oid} appears twice")
        entries[oid] = parts[1]
    return entries


def _svn(element: der.Element, what: str, limit: int) -> int:
    value = element.integer()
    if not 0 <= value <= limit:
        raise _malformed(f"{what} {value} is out of range 0..{limit}")
    return value


def _tcb(element: der.Element) -> PckTcb:
    entries = _entries(element)
    components = []
    for index in range(1, SGX_TCB_COMPONENTS + 1):
        component = entries.get(f"{_TCB}.{index}")
        if component is None:
            raise _malformed(f"SGX TCB component {index} is missing")
        components.append(_svn(component, f"SGX TCB component {index}", 0xFF))
    if _PCESVN not in entries or _CPUSVN not in entries:
        raise _malformed("PCESVN or CPUSVN is missing")
    cpusvn = entries[_CPUSVN].octets()
    if len(cpusvn) != CPUSVN_SIZE:
        raise _malformed(f"CPUSVN must be {CPUSVN_SIZE} bytes, got {len(cpusvn)}")
    return PckTcb(tuple(components), _svn(entries[_PCESVN], "PCESVN", 0xFFFF), cpusvn)


def _configuration(element: der.Element) -> PlatformConfiguration:
    entries = _entries(element)

    def flag(oid: str) -> bool | None:
        value = entries.get(oid)
        return value.boolean() if value is not None else None

    return PlatformConfiguration(flag(_DYNAMIC_PLATFORM), flag(_CACHED_KEYS), flag(_SMT_ENABLED))
