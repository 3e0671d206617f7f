"""What AMD's VCEK/VLEK certificates say about the chip: product, TCB, chip id or CSP.

The facts sit in non-critical extensions under 1.3.6.1.4.1.3704.1 (AMD's "VCEK Certificate and
KDS Interface Specification"; research/attestation.md §2.2). `cryptography` hands them over as
`UnrecognizedExtension` values; each is one DER INTEGER or IA5String, or the bare chip id, so
these few primitives are decoded here: no ASN.1 library is a dependency, and `cryptography` has
no public decoder for a lone DER value.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from contrast.attestation.certificates import common_name
from contrast.attestation.errors import MalformedEvidence, Reason
from contrast.attestation.snp.report import (
    CHIP_ID_SIZE,
    TURIN_CHIP_ID_SIZE,
    Product,
    SigningKey,
    TcbLayout,
    TcbVersion,
)

_AMD_ARC = "1.3.6.1.4.1.3704.1"
OID_STRUCT_VERSION = x509.ObjectIdentifier(f"{_AMD_ARC}.1")
OID_PRODUCT_NAME = x509.ObjectIdentifier(f"{_AMD_ARC}.2")
OID_BL_SPL = x509.ObjectIdentifier(f"{_AMD_ARC}.3.1")
OID_TEE_SPL = x509.ObjectIdentifier(f"{_AMD_ARC}.3.2")
OID_SNP_SPL = x509.ObjectIdentifier(f"{_AMD_ARC}.3.3")
OID_SPL4 = x509.ObjectIdentifier(f"{_AMD_ARC}.3.4")
OID_SPL5 = x509.ObjectIdentifier(f"{_AMD_ARC}.3.5")
OID_SPL6 = x509.ObjectIdentifier(f"{_AMD_ARC}.3.6")
OID_SPL7 = x509.ObjectIdentifier(f"{_AMD_ARC}.3.7")
OID_UCODE_SPL = x509.ObjectIdentifier(f"{_AMD_ARC}.3.8")
OID_FMC_SPL = x509.ObjectIdentifier(f"{_AMD_ARC}.3.9")
OID_HW_ID = x509.ObjectIdentifier(f"{_AMD_ARC}.4")
OID_CSP_ID = x509.ObjectIdentifier(f"{_AMD_ARC}.5")

# The reserved SPLs fill the layout's reserved TCB bytes in byte order (Turin VCEKs have no
# spl4 and three reserved TCB bytes).
RESERVED_SPLS = {
    TcbLayout.MILAN_GENOA: (OID_SPL4, OID_SPL5, OID_SPL6, OID_SPL7),
    TcbLayout.TURIN: (OID_SPL5, OID_SPL6, OID_SPL7),
}

VCEK_COMMON_NAME = "SEV-VCEK"
VLEK_COMMON_NAME = "SEV-VLEK"

TAG_INTEGER = 0x02
TAG_OCTET_STRING = 0x04
TAG_IA5_STRING = 0x16
_HW_ID_SIZES = (CHIP_ID_SIZE, TURIN_CHIP_ID_SIZE)


@dataclass(frozen=True)
class Endorsement:
    """The AMD facts of one VCEK or VLEK certificate.

    A VCEK is bound to one chip (`hw_id`: 64 bytes, 8 on Turin); a VLEK to the cloud provider it
    was issued to (`csp_id`). `fingerprint` is the SHA-256 of the certificate's DER.
    """

    kind: SigningKey
    product: Product | None
    product_name: str | None
    struct_version: int | None
    tcb: TcbVersion
    hw_id: bytes | None
    csp_id: str | None
    fingerprint: bytes

    @classmethod
    def from_certificate(cls, certificate: x509.Certificate) -> Endorsement:
        """Read the AMD extensions; MalformedEvidence(MALFORMED_CERTIFICATE) when they are bad."""
        values = amd_extensions(certificate)
        kind = certificate_kind(certificate, values)
        name = _ia5(values, OID_PRODUCT_NAME)
        product = Product.from_name(name) if name is not None else None
        struct_version = _integer(values, OID_STRUCT_VERSION)
        fmc = _integer(values, OID_FMC_SPL)
        turin = product is Product.TURIN or fmc is not None or (struct_version or 0) >= 1
        layout = TcbLayout.TURIN if turin else TcbLayout.MILAN_GENOA
        reserved = bytes(_integer(values, oid) or 0 for oid in RESERVED_SPLS[layout])
        tcb = TcbVersion(
            bootloader=_required(values, OID_BL_SPL, "blSPL"),
            tee=_required(values, OID_TEE_SPL, "teeSPL"),
            snp=_required(values, OID_SNP_SPL, "snpSPL"),
            microcode=_required(values, OID_UCODE_SPL, "ucodeSPL"),
            fmc=(fmc or 0) if turin else None,
            reserved=int.from_bytes(reserved, "little"),
        )
        hw_id = _hw_id(values.get(OID_HW_ID))
        csp_id = _ia5(values, OID_CSP_ID)
        if kind is SigningKey.VCEK and hw_id is None:
            raise _malformed("the VCEK has no hwID extension (1.3.6.1.4.1.3704.1.4)")
        if hw_id is not None and csp_id is not None:
            raise _malformed("the certificate has both a hwID and a cspID extension")
        return cls(
            kind=kind,
            product=product,
            product_name=name,
            struct_version=struct_version,
            tcb=tcb,
            hw_id=hw_id,
            csp_id=csp_id,
            fingerprint=certificate.fingerprint(hashes.SHA256()),
        )


def certificate_kind(
    certificate: x509.Certificate, values: dict[x509.ObjectIdentifier, bytes] | None = None
) -> SigningKey:
    """VCEK or VLEK: by subject CN, else by which of hwID / cspID the certificate carries."""
    name = common_name(certificate.subject)
    if name == VCEK_COMMON_NAME:
        return SigningKey.VCEK
    if name == VLEK_COMMON_NAME:
        return SigningKey.VLEK
    values = amd_extensions(certificate) if values is None else values
    if OID_HW_ID in values and OID_CSP_ID not in values:
        return SigningKey.VCEK
    if OID_CSP_ID in values and OID_HW_ID not in values:
        return SigningKey.VLEK
    raise _malformed(
        f"certificate {name!r} is neither a VCEK nor a VLEK (subject is not SEV-VCEK/SEV-VLEK"
        " and it has no AMD hwID or cspID extension)"
    )


def product_name(certificate: x509.Certificate) -> str | None:
    """The productName extension, or None when it is missing or unreadable.

    Lenient on purpose: the verifier compares products before it knows whether AMD signed the
    certificate, and a forged certificate must then fail as untrusted, not as malformed.
    """
    try:
        return _ia5(amd_extensions(certificate), OID_PRODUCT_NAME)
    except MalformedEvidence:
        return None


def amd_extensions(certificate: x509.Certificate) -> dict[x509.ObjectIdentifier, bytes]:
    """The raw DER values of the AMD extensions, by OID."""
    try:
        extensions = certificate.extensions
    except ValueError as error:  # duplicate or undecodable standard extensions
        raise _malformed(f"the certificate's extensions cannot be read: {error}") from None
    return {
        extension.oid: extension.value.value
        for extension in extensions
        if isinstance(extension.value, x509.UnrecognizedExtension)
        and extension.oid.dotted_string.startswith(_AMD_ARC + ".")
    }


def decode_der(data: bytes, tag: int, what: str) -> bytes:
    """The content of the single DER primitive `data` with `tag` (short or long length form).

    Raises MalformedEvidence(MALFORMED_CERTIFICATE) on any other tag, a bad length or trailing
    bytes.
    """
    if len(data) < 2 or data[0] != tag:
        raise _malformed(f"{what}: expected DER tag {tag:#04x}")
    length, offset = data[1], 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 2 or len(data) < 2 + count:
            raise _malformed(f"{what}: unsupported DER length")
        length, offset = int.from_bytes(data[2 : 2 + count], "big"), 2 + count
    if offset + length != len(data):
        raise _malformed(f"{what}: DER length {length} does not match {len(data) - offset} bytes")
    return data[offset:]


def _required(
    values: dict[x509.ObjectIdentifier, bytes], oid: x509.ObjectIdentifier, name: str
) -> int:
    value = _integer(values, oid)
    if value is None:
        raise _malformed(f"the certificate has no {name} extension ({oid.dotted_string})")
    return value


def _integer(values: dict[x509.ObjectIdentifier, bytes], oid: x509.ObjectIdentifier) -> int | None:
    """A DER INTEGER holding an SPL or the struct version (0..255)."""
    if oid not in values:
        return None
    what = f"extension {oid.dotted_string}"
    content = decode_der(values[oid], TAG_INTEGER, what)
    if not content:
        raise _malformed(f"{what}: empty INTEGER")
    value = int.from_bytes(content, "big", signed=True)
    if not 0 <= value <= 0xFF:
        raise _malformed(f"{what}: {value} is not in 0..255")
    return value


def _ia5(values: dict[x509.ObjectIdentifier, bytes], oid: x509.ObjectIdentifier) -> str | None:
    if oid not in values:
        return None
    what = f"extension {oid.dotted_string}"
    content = decode_der(values[oid], TAG_IA5_STRING, what)
    if not content.isascii():
        raise _malformed(f"{what}: IA5String is not ASCII")
    return content.decode("ascii")


def _hw_id(value: bytes | None) -> bytes | None:
    """hwID: the bare chip id as AMD issues it, or wrapped in a DER OCTET STRING (as trustee's
    fixtures have it). The wrapper is recognised only around a chip-id-sized value, which a bare
    chip id (64 or 8 bytes) can never be mistaken for."""
    if value is None:
        return None
    if (
        len(value) >= 2
        and value[0] == TAG_OCTET_STRING
        and value[1] == len(value) - 2
        and value[1] in _HW_ID_SIZES
    ):
        value = value[2:]
    if len(value) not in _HW_ID_SIZES:
        raise _malformed(f"hwID is {len(value)} bytes; a chip id is 64 (8 on Turin)")
    return bytes(value)


def _malformed(message: str) -> MalformedEvidence:
    return MalformedEvidence(Reason.MALFORMED_CERTIFICATE, f"VCEK/VLEK: {message}")
