"""An emulated SEV-SNP platform: AMD-format reports signed by a locally generated hierarchy.

It mirrors AMD's (research/attestation.md §2.1, §6): an RSA-4096 ARK (self-signed) signs an ASK
and an ASVK, RSASSA-PSS with SHA-384 and salt 48 throughout, and the ASK signs a P-384 VCEK that
carries AMD's extensions (productName, SPLs, hwID = a random chip id). Reports are version 3 with
the product's CPUID and are signed exactly like the firmware signs them, so `snp.verify` checks
them unchanged with `EmulatedSnp.roots`, and refuses them with AMD's genuine roots.

The hierarchy lives in `<state_dir>/snp/<product>/`; it is generated once into a temporary
directory and renamed into place, so concurrent first uses end with one consistent set.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from contrast.attestation.certificates import load_certificate, serial_number
from contrast.attestation.emulated.state import (
    read_private_key,
    read_state,
    write_atomically,
    write_private_key,
)
from contrast.attestation.snp import certtable, endorsement
from contrast.attestation.snp.report import (
    SIGNATURE_ALGO_ECDSA_P384_SHA384,
    SIGNED_SIZE,
    CpuId,
    FirmwareVersion,
    GuestPolicy,
    PlatformInfo,
    Product,
    Report,
    SignerInfo,
    SigningKey,
    TcbVersion,
)
from contrast.attestation.snp.trust import AmdRootStore, ProductRoots

REPORT_DATA_SIZE = 64
HOST_DATA_SIZE = 32
MEASUREMENT_SIZE = 48
# Contrast's default guest policy: ABI 0.0, SMT allowed, the must-be-one bit; no debugging.
DEFAULT_POLICY = GuestPolicy.SMT | GuestPolicy.RESERVED_MUST_BE_ONE
# The launch measurement of "the emulated guest": a constant no real firmware can produce (it is
# a hash of a label, not of a launch), so reference values of real platforms never match it.
EMULATED_MEASUREMENT = hashlib.sha384(b"contrast emulated SEV-SNP guest").digest()

_PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)
_RSA_BITS = 4096
_ROOT_LIFETIME = timedelta(days=25 * 365)
_VCEK_LIFETIME = timedelta(days=7 * 365)
_BACKDATE = timedelta(days=1)

# What the emulated chip reports, per product: CPUID, VCEK productName, TCB, firmware.
_CPUID = {
    Product.MILAN: CpuId(0x19, 0x01, 0x01),
    Product.GENOA: CpuId(0x19, 0x11, 0x01),
    Product.TURIN: CpuId(0x1A, 0x02, 0x01),
}
_PRODUCT_NAME = {Product.MILAN: "Milan-B0", Product.GENOA: "Genoa", Product.TURIN: "Turin"}
_TCB = {
    Product.MILAN: TcbVersion(bootloader=4, tee=0, snp=24, microcode=219),
    Product.GENOA: TcbVersion(bootloader=10, tee=0, snp=23, microcode=84),
    Product.TURIN: TcbVersion(bootloader=1, tee=0, snp=2, microcode=71, fmc=0),
}
_FIRMWARE = FirmwareVersion(major=1, minor=55, build=35)
_PLATFORM_INFO = PlatformInfo(PlatformInfo.SMT_EN | PlatformInfo.ECC_EN)

_FILES = (
    "ark.key",
    "ask.key",
    "asvk.key",
    "vcek.key",
    "ark.pem",
    "ask.pem",
    "asvk.pem",
    "vcek.der",
)


_ROOT_FILES = ("ark.pem", "ask.pem", "asvk.pem")


def load_roots(state_dir: Path, product: Product = Product.MILAN) -> AmdRootStore | None:
    """The roots an emulated SNP TEE's reports chain to, read from `state_dir`; None if absent.

    For verifiers: only the three certificates are read and nothing is ever created, so a
    verifier can be given the roots without the private keys that issue reports.
    """
    directory = Path(state_dir) / "snp" / product.value.lower()
    if not all((directory / name).is_file() for name in _ROOT_FILES):
        return None
    ark, ask, asvk = (
        load_certificate(read_state(directory / name), what=f"emulated {name}")
        for name in _ROOT_FILES
    )
    return AmdRootStore({product: ProductRoots(ark=ark, ask=ask, asvk=asvk)}, genuine=False)


class EmulatedSnp:
    """A software SNP chip with its own ARK → ASK → VCEK hierarchy (and an ASVK)."""

    def __init__(self, state_dir: Path, product: Product = Product.MILAN) -> None:
        self.product = product
        self.measurement = EMULATED_MEASUREMENT
        self._directory = Path(state_dir) / "snp" / product.value.lower()
        if not all((self._directory / name).is_file() for name in _FILES):
            _generate(self._directory, product)
        self._ark = self._certificate("ark.pem")
        self._ask = self._certificate("ask.pem")
        self._asvk = self._certificate("asvk.pem")
        self._vcek_der = read_state(self._directory / "vcek.der")
        self._vcek = load_certificate(self._vcek_der, what="emulated VCEK")
        key = read_private_key(self._directory / "vcek.key")
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        self._vcek_key = key
        facts = endorsement.Endorsement.from_certificate(self._vcek)
        assert facts.hw_id is not None
        self.chip_id = facts.hw_id.ljust(64, b"\0")
        self.tcb = facts.tcb
        self.roots = AmdRootStore(
            {product: ProductRoots(ark=self._ark, ask=self._ask, asvk=self._asvk)}, genuine=False
        )

    @property
    def vcek(self) -> x509.Certificate:
        return self._vcek

    @property
    def vcek_der(self) -> bytes:
        return self._vcek_der

    def issue(
        self,
        report_data: bytes,
        host_data: bytes = bytes(HOST_DATA_SIZE),
        *,
        measurement: bytes | None = None,
        policy: int = DEFAULT_POLICY,
        vmpl: int = 0,
    ) -> tuple[bytes, list[bytes]]:
        """A signed 1184-byte v3 report binding `report_data`, and [the VCEK's DER]."""
        if len(report_data) != REPORT_DATA_SIZE:
            raise ValueError(f"report data is {REPORT_DATA_SIZE} bytes, got {len(report_data)}")
        if len(host_data) != HOST_DATA_SIZE:
            raise ValueError(f"host data is {HOST_DATA_SIZE} bytes, got {len(host_data)}")
        measurement = self.measurement if measurement is None else measurement
        if len(measurement) != MEASUREMENT_SIZE:
            raise ValueError(f"a measurement is {MEASUREMENT_SIZE} bytes, got {len(measurement)}")
        unsigned = Report(
            version=3,
            guest_svn=0,
            policy=GuestPolicy(policy),
            family_id=bytes(16),
            image_id=bytes(16),
            vmpl=vmpl,
            signature_algo=SIGNATURE_ALGO_ECDSA_P384_SHA384,
            current_tcb=self.tcb,
            platform_info=_PLATFORM_INFO,
            signer_info=SignerInfo.build(SigningKey.VCEK),
            report_data=bytes(report_data),
            measurement=bytes(measurement),
            host_data=bytes(host_data),
            id_key_digest=bytes(48),
            author_key_digest=bytes(48),
            report_id=secrets.token_bytes(32),
            report_id_ma=b"\xff" * 32,
            reported_tcb=self.tcb,
            cpuid=_CPUID[self.product],
            chip_id=self.chip_id,
            committed_tcb=self.tcb,
            current=_FIRMWARE,
            committed=_FIRMWARE,
            launch_tcb=self.tcb,
            launch_mit_vector=None,
            current_mit_vector=None,
            signature_r=0,
            signature_s=0,
            tcb_layout=self.product.tcb_layout,
        )
        signature = self._vcek_key.sign(
            unsigned.to_bytes()[:SIGNED_SIZE], ec.ECDSA(hashes.SHA384())
        )
        r, s = decode_dss_signature(signature)
        return replace(unsigned, signature_r=r, signature_s=s).to_bytes(), [self._vcek_der]

    def cert_table(self) -> bytes:
        """The extended report's certificate table: VCEK, ASK and ARK (DER)."""
        der = serialization.Encoding.DER
        return certtable.CertTable.from_entries(
            [
                (certtable.VCEK_GUID, self._vcek_der),
                (certtable.ASK_GUID, self._ask.public_bytes(der)),
                (certtable.ARK_GUID, self._ark.public_bytes(der)),
            ]
        ).to_bytes()

    def crl(
        self,
        revoked: list[x509.Certificate],
        *,
        now: datetime,
        next_update: timedelta = timedelta(days=7),
    ) -> x509.CertificateRevocationList:
        """A CRL signed by the ARK (as AMD's KDS serves one) listing `revoked`."""
        key = read_private_key(self._directory / "ark.key")
        assert isinstance(key, rsa.RSAPrivateKey)
        builder = (
            x509.CertificateRevocationListBuilder()
            .issuer_name(self._ark.subject)
            .last_update(now - _BACKDATE)
            .next_update(now + next_update)
        )
        for certificate in revoked:
            builder = builder.add_revoked_certificate(
                x509.RevokedCertificateBuilder()
                .serial_number(serial_number(certificate))
                .revocation_date(now - _BACKDATE)
                .build()
            )
        return builder.sign(key, hashes.SHA384(), rsa_padding=_PSS)

    def _certificate(self, name: str) -> x509.Certificate:
        return load_certificate(read_state(self._directory / name), what=f"emulated {name}")


def _generate(directory: Path, product: Product) -> None:
    """Create the hierarchy in a temporary sibling directory, then rename it into place."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        _write_hierarchy(staging, product)
        try:
            os.rename(staging, directory)
        except OSError:
            if not all((directory / name).is_file() for name in _FILES):
                # A half-written directory from an older crash: replace it.
                shutil.rmtree(directory, ignore_errors=True)
                os.rename(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_hierarchy(directory: Path, product: Product) -> None:
    now = datetime.now(UTC)
    name = product.value
    ark_key = rsa.generate_private_key(public_exponent=65537, key_size=_RSA_BITS)
    ask_key = rsa.generate_private_key(public_exponent=65537, key_size=_RSA_BITS)
    asvk_key = rsa.generate_private_key(public_exponent=65537, key_size=_RSA_BITS)
    vcek_key = ec.generate_private_key(ec.SECP384R1())
    ark_name, ask_name = _amd_name(f"ARK-{name}"), _amd_name(f"SEV-{name}")
    ark = _sign(
        _builder(ark_name, ark_name, ark_key.public_key(), now, _ROOT_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(crl_sign=True), critical=True),
        ark_key,
    )
    intermediates = []
    for subject, key in ((ask_name, ask_key), (_amd_name(f"SEV-VLEK-{name}"), asvk_key)):
        intermediates.append(
            _sign(
                _builder(subject, ark_name, key.public_key(), now, _ROOT_LIFETIME)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(_key_usage(crl_sign=False), critical=True),
                ark_key,
            )
        )
    ask, asvk = intermediates
    vcek_builder = _builder(
        _amd_name(endorsement.VCEK_COMMON_NAME),
        ask_name,
        vcek_key.public_key(),
        now,
        _VCEK_LIFETIME,
    )
    for oid, value in _vcek_extensions(product):
        vcek_builder = vcek_builder.add_extension(x509.UnrecognizedExtension(oid, value), False)
    vcek = _sign(vcek_builder, ask_key)
    pem = serialization.Encoding.PEM
    private_keys: tuple[tuple[str, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey], ...] = (
        ("ark.key", ark_key),
        ("ask.key", ask_key),
        ("asvk.key", asvk_key),
        ("vcek.key", vcek_key),
    )
    for file, private_key in private_keys:
        write_private_key(directory / file, private_key)
    for file, certificate in (("ark.pem", ark), ("ask.pem", ask), ("asvk.pem", asvk)):
        write_atomically(directory / file, certificate.public_bytes(pem))
    write_atomically(directory / "vcek.der", vcek.public_bytes(serialization.Encoding.DER))


def _vcek_extensions(product: Product) -> list[tuple[x509.ObjectIdentifier, bytes]]:
    """AMD's VCEK extensions as raw DER, laid out as real VCEKs have them (§2.2)."""
    tcb = _TCB[product]
    turin = product is Product.TURIN
    chip_id = secrets.token_bytes(8 if turin else 64)
    reserved = endorsement.RESERVED_SPLS[tcb.layout]
    extensions = [
        (endorsement.OID_STRUCT_VERSION, _der_integer(1 if turin else 0)),
        (
            endorsement.OID_PRODUCT_NAME,
            _der(endorsement.TAG_IA5_STRING, _PRODUCT_NAME[product].encode()),
        ),
        (endorsement.OID_BL_SPL, _der_integer(tcb.bootloader)),
        (endorsement.OID_TEE_SPL, _der_integer(tcb.tee)),
        (endorsement.OID_SNP_SPL, _der_integer(tcb.snp)),
        *[(oid, _der_integer(0)) for oid in reserved],
        (endorsement.OID_UCODE_SPL, _der_integer(tcb.microcode)),
    ]
    if tcb.fmc is not None:
        extensions.append((endorsement.OID_FMC_SPL, _der_integer(tcb.fmc)))
    extensions.append((endorsement.OID_HW_ID, chip_id))  # bare bytes, as AMD issues them
    return extensions


def _der_integer(value: int) -> bytes:
    """DER INTEGER of a small non-negative number (a 0x00 prefix when the top bit is set)."""
    return _der(endorsement.TAG_INTEGER, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _der(tag: int, content: bytes) -> bytes:
    assert len(content) < 0x80
    return bytes([tag, len(content)]) + content


def _amd_name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Engineering"),
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.LOCALITY_NAME, "Santa Clara"),
            x509.NameAttribute(NameOID.STATE_OR_PROVINCE_NAME, "CA"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Advanced Micro Devices (emulated)"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: rsa.RSAPublicKey | ec.EllipticCurvePublicKey,
    now: datetime,
    lifetime: timedelta,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + lifetime)
    )


def _key_usage(*, crl_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _sign(builder: x509.CertificateBuilder, key: rsa.RSAPrivateKey) -> x509.Certificate:
    return builder.sign(key, hashes.SHA384(), rsa_padding=_PSS)
