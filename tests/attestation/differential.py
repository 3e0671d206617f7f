"""Differential verification: our SNP and TDX verifiers against Google's on the same inputs.

Each case is one piece of evidence (an SNP report with its VCEK, or a TDX quote with its Intel
collateral), the instant to verify at and a policy. Our side runs `snp.verify.verify_evidence` +
`snp.reference.validate_report`, or `tdx.verify.verify_quote_bytes` + `tdx.reference.
validate_quote`; Google's side is the Go driver in tools/differential (go-sev-guest's `verify` and
`validate`, go-tdx-guest's `verify` and `validate`), built once per go.sum into a cache directory
outside the repository and fed the same cases as JSON lines. Both are offline: the roots are the
test data's, go-tdx-guest's collateral "downloads" are answered from the case.

The policy is the same on both sides as far as the two libraries can express it (README,
"Differential verification against Google's verifiers"): the measurement / MRTD of the original
vector, minimum TCB = its REPORTED_TCB, debug refused, SMT / migration agent / CXL allowed only if
the original report allows them, VMPL 0, TD attributes = the original's without DEBUG, and with
collateral only an UpToDate TCB (go-tdx-guest accepts nothing else).

The cases are the real vectors of ../shared/testdata/attestation and mutations of them, drawn
from a seeded RNG (the same seed gives the same cases): bit flips anywhere in the evidence, the
VCEK, the TCB info, the QE identity and the CRLs; edits of named fields; swapped artefacts; and
signature-keeping variations of the policy and the instant. `KNOWN_DIFFERENCES` lists the
disagreements that are deliberate; anything else is a finding.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import re
import struct
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509

from contrast.attestation.certificates import load_certificate, load_certificates, parse_time
from contrast.attestation.errors import AttestationError
from contrast.attestation.snp.reference import MinimumTcb, SnpReferenceValues, validate_report
from contrast.attestation.snp.report import GuestPolicy, Product, Report
from contrast.attestation.snp.trust import GENUINE_AMD_ROOTS
from contrast.attestation.snp.verify import verify_evidence
from contrast.attestation.tdx.collateral import load_collateral
from contrast.attestation.tdx.quote import Quote
from contrast.attestation.tdx.reference import TdxReferenceValues, validate_quote
from contrast.attestation.tdx.tcbstatus import TcbStatus
from contrast.attestation.tdx.trust import GENUINE_INTEL_ROOTS
from contrast.attestation.tdx.verify import verify_quote_bytes
from contrast.errors import ContrastError
from tests.attestation.tdx.vectors import COLLATERAL_KEYS, collateral_paths
from tests.conftest import ATTESTATION_DATA, REPO, Vector, load_vectors

DRIVER_SOURCE = REPO / "tools" / "differential"
CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "contrast"
ROOTS = ATTESTATION_DATA / "roots"


# The Go driver.


class DriverBuildError(RuntimeError):
    """Go or its module proxy is missing, or the driver does not compile."""


def driver_path() -> Path:
    """Build the driver once per go.mod/go.sum/main.go content; reuse it afterwards."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((DRIVER_SOURCE / name).read_bytes())
    target = CACHE_ROOT / "differential" / digest.hexdigest()[:16] / "differential"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    try:
        result = subprocess.run(
            ["go", "build", "-trimpath", "-o", str(partial), "."],
            cwd=DRIVER_SOURCE,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false"},
        )
    except FileNotFoundError:
        raise DriverBuildError(
            "go is not installed: the differential test builds tools/differential with Go"
        ) from None
    if result.returncode != 0:
        raise DriverBuildError(f"go build in {DRIVER_SOURCE} failed:\n{result.stderr}")
    partial.replace(target)
    return target


# Cases.


@dataclass(frozen=True)
class SnpPolicy:
    measurement: bytes
    min_tcb: tuple[int, int, int, int]  # bl, tee, snp, ucode
    allow_debug: bool = False
    allow_smt: bool = True
    allow_migrate_ma: bool = False
    allow_cxl: bool = False
    vmpl: int = 0
    product: str | None = None

    def to_json(self) -> dict[str, Any]:
        bl, tee, snp, ucode = self.min_tcb
        return {
            "measurement": _b64(self.measurement),
            "min_tcb": {"bl": bl, "tee": tee, "snp": snp, "ucode": ucode},
            "allow_debug": self.allow_debug,
            "allow_smt": self.allow_smt,
            "allow_migrate_ma": self.allow_migrate_ma,
            "allow_cxl": self.allow_cxl,
            "vmpl": self.vmpl,
            "product": self.product or "",
        }

    def reference(self) -> SnpReferenceValues:
        bl, tee, snp, ucode = self.min_tcb
        return SnpReferenceValues(
            measurements=frozenset({self.measurement}),
            minimum_tcb=MinimumTcb(bootloader=bl, tee=tee, snp=snp, microcode=ucode),
            allow_debug=self.allow_debug,
            allow_smt=self.allow_smt,
            allow_migrate_ma=self.allow_migrate_ma,
            allow_cxl=self.allow_cxl,
            vmpl=self.vmpl,
        )


@dataclass(frozen=True)
class TdxPolicy:
    """`td_attributes` as the original quote has them. Debug refused: ours refuses DEBUG and
    compares the rest; go-tdx-guest, whose one attribute rule is the exact value, is given them
    with DEBUG cleared. Debug allowed: ours ignores the bit, Google is given them as they are."""

    mr_td: bytes
    td_attributes: bytes
    up_to_date_only: bool
    allow_debug: bool = False

    def to_json(self) -> dict[str, Any]:
        attributes = self.td_attributes
        if not self.allow_debug:
            attributes = bytes([attributes[0] & 0xFE]) + attributes[1:]
        return {"mr_td": _b64(self.mr_td), "td_attributes": _b64(attributes)}

    def reference(self) -> TdxReferenceValues:
        return TdxReferenceValues(
            mr_td=frozenset({self.mr_td}),
            td_attributes=self.td_attributes,
            allow_debug=self.allow_debug,
            accepted_tcb_statuses=(
                frozenset({TcbStatus.UP_TO_DATE}) if self.up_to_date_only else frozenset()
            ),
        )


@dataclass(frozen=True)
class Case:
    """One input for both verifiers; `mutation` names its class, `detail` what exactly changed."""

    id: str
    kind: str  # "snp" | "tdx"
    base: str  # the vector it was derived from
    mutation: str
    detail: str
    now: datetime
    evidence: bytes
    policy: SnpPolicy | TdxPolicy
    vcek: bytes = b""
    collateral: dict[str, bytes] | None = None

    def to_json(self) -> str:
        document: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "now": self.now.isoformat().replace("+00:00", "Z"),
            "evidence": _b64(self.evidence),
            "policy": self.policy.to_json(),
        }
        if self.kind == "snp":
            document["vcek"] = _b64(self.vcek)
        if self.collateral is not None:
            document["collateral"] = {k: _b64(v) for k, v in self.collateral.items()}
        return json.dumps(document)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# Our verdict.


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str


def ours(case: Case) -> Verdict:
    """Our verifier's verdict; anything but our own error hierarchy is a crash (a finding)."""
    try:
        if case.kind == "snp":
            assert isinstance(case.policy, SnpPolicy)
            product = Product(case.policy.product) if case.policy.product else None
            verified = verify_evidence(
                case.evidence,
                [load_certificate(case.vcek, what="VCEK")],
                now=case.now,
                roots=GENUINE_AMD_ROOTS,
                product=product,
            )
            validate_report(verified, case.policy.reference())
        else:
            assert isinstance(case.policy, TdxPolicy)
            collateral = None
            if case.collateral is not None:
                collateral = load_collateral(list(case.collateral.values()))
            verified_quote = verify_quote_bytes(
                case.evidence, now=case.now, roots=GENUINE_INTEL_ROOTS, collateral=collateral
            )
            validate_quote(verified_quote, case.policy.reference())
    except AttestationError as error:
        return Verdict(False, f"{error.reason}: {error}")
    except ContrastError as error:
        return Verdict(False, f"error: {error}")
    except Exception as error:  # a crash is what this looks for
        return Verdict(False, f"crash: {type(error).__name__}: {error}")
    return Verdict(True, "")


# Known, deliberate differences: a disagreement matching one of these is expected; any other is a
# finding. Each names the README paragraph that explains it.


@dataclass(frozen=True)
class KnownDifference:
    name: str
    matches: Callable[[Case, Verdict, Verdict], bool]


def _google_refuses_v5(case: Case, our: Verdict, google: Verdict) -> bool:
    return case.kind == "tdx" and our.ok and "parse: quote format not supported" in google.reason


def _genoa_model_a0(case: Case, our: Verdict, google: Verdict) -> bool:
    """go-sev-guest maps CPUID family 19h model A0h (a Genoa-family part) to no product."""
    return (
        case.kind == "snp"
        and our.ok
        and len(case.evidence) > 0x18A
        and case.evidence[0x188:0x18A] == b"\x19\xa0"
        and "could not be verified by any trusted roots. Last error: <nil>" in google.reason
    )


_FMSPC = re.compile(r'FMSPC from PCK Certificate\("(\w+)"\) is not equal to FMSPC value from'
                    r' Intel PCS\'s reported TDX TCB info\("(\w+)"\)')  # fmt: skip


def _fmspc_case(case: Case, our: Verdict, google: Verdict) -> bool:
    """go-tdx-guest compares the FMSPC as text; Intel spells it in upper case in some TCB infos."""
    match = _FMSPC.search(google.reason)
    return our.ok and match is not None and match[1].lower() == match[2].lower()


def _pck_chain_form(case: Case, our: Verdict, google: Verdict) -> bool:
    """The PEM PCK chain without its root, or with bytes after its last certificate."""
    return our.ok and (
        "verify: incomplete PCK Certificate chain found" in google.reason
        or "verify: unexpected trailing bytes were found in PCK Certificate Chain" in google.reason
    )


def _tcb_signing_pinned(case: Case, our: Verdict, google: Verdict) -> bool:
    """Ours holds Intel's TCB Signing certificates itself; Google uses the collateral's chain."""
    return (
        our.ok
        and case.mutation.endswith("tcb_signing_chain")
        and (
            "signing certificate has expired" in google.reason
            or "tcbInfo response verification failed" in google.reason
            or "QeIdentity response verification failed" in google.reason
            or "Issuer-Chain" in google.reason
        )
    )


def _product_against_cpuid(case: Case, our: Verdict, google: Verdict) -> bool:
    """Ours refuses a configured product the report's CPUID contradicts; go-sev-guest reads
    the configured product only for version 2 reports (which have no CPUID)."""
    return (
        case.kind == "snp"
        and google.ok
        and our.reason.startswith("product_mismatch: the report comes from a")
    )


def _collateral_not_yet_valid(case: Case, our: Verdict, google: Verdict) -> bool:
    """Ours refuses collateral issued after the instant checked; go-tdx-guest reads only
    nextUpdate (and no CRL's thisUpdate)."""
    return google.ok and (
        our.reason.startswith(("tcb_info_not_yet_valid", "qe_identity_not_yet_valid"))
        or (our.reason.startswith("bad_crl") and "is not valid before" in our.reason)
    )


def _sev_reencoding(case: Case, our: Verdict, google: Verdict) -> bool:
    """go-sev-guest checks the signature over its own re-encoding of the parsed report, which
    keeps only 4 bits of the CPUID stepping byte (and the family/model it can represent)."""
    if case.kind != "snp" or not google.ok or not our.reason.startswith("bad_report_signature"):
        return False
    original = next((v for v in SNP_VECTORS if v.name == case.base), None)
    if original is None or len(case.evidence) != len(original.file("report")):
        return False
    changed = [
        i
        for i, (a, b) in enumerate(zip(case.evidence, original.file("report"), strict=True))
        if a != b
    ]
    return all(0x188 <= i < 0x18B for i in changed)


KNOWN_DIFFERENCES: tuple[KnownDifference, ...] = (
    KnownDifference(
        "go-sev-guest verifies its re-encoding of the report, not the bytes", _sev_reencoding
    ),
    KnownDifference("go-tdx-guest v0.3.1 cannot parse version 5 quotes", _google_refuses_v5),
    KnownDifference(
        "go-sev-guest knows no product for CPUID model A0h (Genoa family)", _genoa_model_a0
    ),
    KnownDifference("go-tdx-guest compares the FMSPC case-sensitively", _fmspc_case),
    KnownDifference("PCK chain without its root or with bytes after it", _pck_chain_form),
    KnownDifference(
        "TCB Signing certificates pinned, not taken from the collateral", _tcb_signing_pinned
    ),
    KnownDifference("configured product checked against CPUID", _product_against_cpuid),
    KnownDifference("collateral issued after the instant checked", _collateral_not_yet_valid),
)


def known_difference(case: Case, our: Verdict, google: Verdict) -> str | None:
    for known in KNOWN_DIFFERENCES:
        if known.matches(case, our, google):
            return known.name
    return None


# Base cases: the real vectors.


SNP_VECTORS = [
    v
    for v in load_vectors("snp")
    if "report" in v.expected["files"] and v.expected["expected"] != "unverifiable"
]
TDX_VECTORS = load_vectors("tdx")


def _snp_base(vector: Vector) -> Case:
    report_bytes = vector.file("report")
    product = vector.expected.get("verify_with", {}).get("product")
    try:  # negative vectors carry no facts; read them from the report (it may not parse)
        parsed = Report.from_bytes(report_bytes, product=Product(product) if product else None)
        measurement, policy_bits = parsed.measurement, int(parsed.policy)
        tcb = parsed.reported_tcb
        min_tcb = (tcb.bootloader, tcb.tee, tcb.snp, tcb.microcode)
    except AttestationError:
        measurement, policy_bits, min_tcb = bytes(48), 0, (0, 0, 0, 0)
    policy = SnpPolicy(
        measurement=measurement,
        min_tcb=min_tcb,
        allow_smt=bool(policy_bits & GuestPolicy.SMT),
        allow_migrate_ma=bool(policy_bits & GuestPolicy.MIGRATE_MA),
        allow_cxl=bool(policy_bits & GuestPolicy.CXL_ALLOW),
        product=product,
    )
    return Case(
        id=vector.name,
        kind="snp",
        base=vector.name,
        mutation="real",
        detail=f"expected {vector.expected['expected']}",
        now=parse_time(vector.expected["valid_at"]),
        evidence=report_bytes,
        policy=policy,
        vcek=vector.file("vcek"),
    )


def _tdx_base(vector: Vector) -> Case:
    quote_bytes = vector.file("quote")
    paths = collateral_paths(vector)
    collateral = (
        {key: path.read_bytes() for key, path in zip(_present_keys(vector), paths, strict=True)}
        if paths
        else None
    )
    td = vector.expected.get("td")
    if td is not None:
        mr_td = bytes.fromhex(td["mr_td"])
        attributes = bytes.fromhex(td["td_attributes"])
    else:  # a negative vector without facts: read them from the quote (it may not parse)
        try:
            body = Quote.from_bytes(quote_bytes).body
            mr_td, attributes = body.mr_td, body.td_attributes
        except AttestationError:
            mr_td, attributes = bytes(48), bytes(8)
    return Case(
        id=vector.name,
        kind="tdx",
        base=vector.name,
        mutation="real",
        detail=f"expected {vector.expected['expected']}",
        now=parse_time(vector.expected["valid_at"]),
        evidence=quote_bytes,
        policy=TdxPolicy(mr_td, attributes, up_to_date_only=collateral is not None),
        collateral=collateral,
    )


def _present_keys(vector: Vector) -> list[str]:
    named = vector.expected.get("collateral", {})
    return [key for key in COLLATERAL_KEYS if key in named]


def real_cases() -> list[Case]:
    """Every real vector with a report or quote, as its own base case."""
    return [_snp_base(v) for v in SNP_VECTORS] + [
        _tdx_base(v) for v in TDX_VECTORS if "quote" in v.expected["files"]
    ]


# Mutations.

# SNP report fields (offset, size) of the ABI (SEV-SNP firmware ABI, table 23).
SNP_FIELDS = {
    "version": (0x00, 4),
    "guest_svn": (0x04, 4),
    "policy": (0x08, 8),
    "vmpl": (0x30, 4),
    "signature_algo": (0x34, 4),
    "current_tcb": (0x38, 8),
    "platform_info": (0x40, 8),
    "signer_info": (0x48, 4),
    "measurement": (0x90, 48),
    "reported_tcb": (0x180, 8),
    "cpuid": (0x188, 3),
    "chip_id": (0x1A0, 64),
    "committed_tcb": (0x1E0, 8),
    "launch_tcb": (0x1F0, 8),
    "signature_r": (0x2A0, 72),
    "signature_s": (0x2E8, 72),
    "signature_reserved": (0x330, 0x4A0 - 0x330),
}
P384_N = int(
    "ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf581a0db248b0a77aecec196accc52973",
    16,
)

# TDX 1.0 TD report body fields (offset from the body's start, size).
TDX_BODY_FIELDS = {
    "tee_tcb_svn": (0, 16),
    "mr_seam": (16, 48),
    "mr_signer_seam": (64, 48),
    "seam_attributes": (112, 8),
    "td_attributes": (120, 8),
    "xfam": (128, 8),
    "mr_td": (136, 48),
    "mr_config_id": (184, 48),
    "rtmr0": (328, 48),
    "report_data": (520, 64),
}
# Offsets inside the signature data (after its u32 length).
TDX_SIGNATURE_FIELDS = {
    "quote_signature": (0, 64),
    "attestation_key": (64, 64),
    "certification_type": (128, 2),
    "certification_size": (130, 4),
    "qe_report_cpusvn": (134, 16),
    "qe_report_attributes": (134 + 48, 16),
    "qe_report_mrsigner": (134 + 128, 32),
    "qe_report_isvprodid": (134 + 256, 2),
    "qe_report_isvsvn": (134 + 258, 2),
    "qe_report_data": (134 + 320, 64),
    "qe_report_signature": (518, 64),
    "qe_auth_data_length": (582, 2),
}


def _flip(data: bytes, rng: random.Random, bits: int = 1) -> tuple[bytes, str]:
    mutable = bytearray(data)
    where = []
    for index in rng.sample(range(len(mutable) * 8), min(bits, len(mutable) * 8)):
        mutable[index // 8] ^= 1 << (index % 8)
        where.append(f"{index // 8:#x}.{index % 8}")
    return bytes(mutable), "bit " + ",".join(where)


def _edit(data: bytes, offset: int, size: int, rng: random.Random) -> tuple[bytes, str]:
    """Change the field at offset: one random byte set to a random other value, or all zero."""
    mutable = bytearray(data)
    if rng.random() < 0.2 and any(mutable[offset : offset + size]):
        mutable[offset : offset + size] = bytes(size)
        return bytes(mutable), "zeroed"
    index = offset + rng.randrange(size)
    value = rng.choice([v for v in range(256) if v != mutable[index]])
    mutable[index] = value
    return bytes(mutable), f"byte {index:#x} := {value:#04x}"


def _set_int(data: bytes, offset: int, size: int, value: int) -> bytes:
    return data[:offset] + value.to_bytes(size, "little") + data[offset + size :]


def _snp_mutations(base: Case, vectors: list[Case], rng: random.Random) -> Iterator[Case]:
    """Endless mutations of one SNP base case, a random class each time."""
    assert isinstance(base.policy, SnpPolicy)
    policy = base.policy
    report = base.evidence
    vcek = load_certificate(base.vcek, what="VCEK")
    while True:
        choice = rng.random()
        if choice < 0.30:
            evidence, detail = _flip(report, rng, rng.choice((1, 1, 2, 3)))
            yield replace(base, mutation="bitflip:report", detail=detail, evidence=evidence)
        elif choice < 0.45:
            name = rng.choice(list(SNP_FIELDS))
            offset, size = SNP_FIELDS[name]
            if len(report) < offset + size:
                continue
            evidence, detail = _edit(report, offset, size, rng)
            yield replace(base, mutation=f"field:{name}", detail=detail, evidence=evidence)
        elif choice < 0.50:
            yield from _snp_signature_edits(base, rng)
        elif choice < 0.62:
            certificate, detail = _flip(base.vcek, rng, rng.choice((1, 1, 2)))
            yield replace(base, mutation="bitflip:vcek", detail=detail, vcek=certificate)
        elif choice < 0.70:
            certificate, detail = _certificate_edit(base.vcek, rng)
            yield replace(base, mutation="field:vcek", detail=detail, vcek=certificate)
        elif choice < 0.75:
            other = rng.choice(vectors)
            yield replace(
                base, mutation="swap:vcek", detail=f"VCEK of {other.base}", vcek=other.vcek
            )
        elif choice < 0.80:
            other = rng.choice(vectors)
            yield replace(
                base, mutation="swap:report", detail=f"report of {other.base}",
                evidence=other.evidence,
            )  # fmt: skip
        else:
            yield from _snp_policy_variation(base, policy, vcek, rng)


def _snp_signature_edits(base: Case, rng: random.Random) -> Iterator[Case]:
    """Signature-keeping and signature-breaking edits of r and s as integers."""
    report = base.evidence
    if len(report) != 0x4A0:
        return
    r = int.from_bytes(report[0x2A0:0x2E8], "little")
    s = int.from_bytes(report[0x2E8:0x330], "little")
    kind = rng.choice(("s=n-s", "r=r+n", "s=s+n", "r=0", "s=0", "r=n", "s=n"))
    new_r, new_s = {
        "s=n-s": (r, P384_N - s),
        "r=r+n": (r + P384_N, s),
        "s=s+n": (r, s + P384_N),
        "r=0": (0, s),
        "s=0": (r, 0),
        "r=n": (P384_N, s),
        "s=n": (r, P384_N),
    }[kind]
    evidence = _set_int(_set_int(report, 0x2A0, 72, new_r), 0x2E8, 72, new_s)
    yield replace(base, mutation=f"signature:{kind}", detail=kind, evidence=evidence)


def _certificate_edit(der: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Edit a VCEK field in place: an AMD extension's value, the validity, the product name."""
    targets: list[tuple[str, int, int]] = []
    amd_arc = bytes.fromhex("2b060104019c78")  # 1.3.6.1.4.1.3704
    for match in re.finditer(re.escape(amd_arc), der):
        targets.append(("amd-extension", match.end(), 12))
    for match in re.finditer(rb"\x17\x0d\d{12}Z", der):
        targets.append(("validity", match.start() + 2, 12))
    for match in re.finditer(rb"Milan|Genoa|Turin", der):
        targets.append(("product-name", match.start(), match.end() - match.start()))
    if not targets:
        return _flip(der, rng)
    what, offset, size = rng.choice(targets)
    if what == "validity":
        mutable = bytearray(der)
        index = offset + rng.randrange(size)
        mutable[index] = ord(rng.choice([d for d in "0123456789" if ord(d) != der[index]]))
        return bytes(mutable), f"validity digit {index:#x}"
    if what == "product-name":
        replacement = rng.choice(
            [n for n in (b"Milan", b"Genoa", b"Turin") if n != der[offset : offset + size]]
        )
        return der[:offset] + replacement + der[offset + size :], f"productName := {replacement!r}"
    edited, detail = _edit(der, offset, min(size, len(der) - offset), rng)
    return edited, f"{what} {detail}"


def _snp_policy_variation(
    base: Case, policy: SnpPolicy, vcek: Any, rng: random.Random
) -> Iterator[Case]:
    """Signature-keeping variations: the instant, the minimum TCB, product, debug, VMPL, SMT."""
    choice = rng.randrange(10)
    if choice == 9:
        edge = rng.choice((vcek.not_valid_before_utc, vcek.not_valid_after_utc))
        when = edge + timedelta(seconds=rng.choice((-1, 0, 1)))
        yield replace(base, mutation="policy:vcek-edge", detail=str(when), now=when)
    elif choice == 0:
        when = vcek.not_valid_before_utc - timedelta(seconds=rng.choice((1, 3600, 86400 * 30)))
        yield replace(base, mutation="policy:before-vcek", detail=str(when), now=when)
    elif choice == 1:
        when = vcek.not_valid_after_utc + timedelta(seconds=rng.choice((1, 86400)))
        yield replace(base, mutation="policy:after-vcek", detail=str(when), now=when)
    elif choice == 2:
        when = vcek.not_valid_before_utc + timedelta(
            seconds=rng.randrange(int((vcek.not_valid_after_utc - vcek.not_valid_before_utc)
                                      .total_seconds()))
        )  # fmt: skip
        yield replace(base, mutation="policy:inside-vcek", detail=str(when), now=when)
    elif choice == 3:
        component = rng.randrange(4)
        raised = list(policy.min_tcb)
        raised[component] = min(255, raised[component] + rng.choice((1, 1, 5)))
        yield replace(
            base,
            mutation="policy:min-tcb-above",
            detail=f"min_tcb {tuple(raised)}",
            policy=replace(policy, min_tcb=(raised[0], raised[1], raised[2], raised[3])),
        )
    elif choice == 4:
        lowered = tuple(max(0, v - rng.randrange(3)) for v in policy.min_tcb)
        yield replace(
            base,
            mutation="policy:min-tcb-below",
            detail=f"min_tcb {lowered}",
            policy=replace(policy, min_tcb=(lowered[0], lowered[1], lowered[2], lowered[3])),
        )
    elif choice == 5:
        product = rng.choice([p.value for p in Product])
        yield replace(
            base,
            mutation="policy:product",
            detail=f"product {product}",
            policy=replace(policy, product=product),
        )
    elif choice == 6:
        yield replace(
            base,
            mutation="policy:allow-debug",
            detail="debug allowed",
            policy=replace(policy, allow_debug=True),
        )
    elif choice == 7:
        vmpl = rng.randrange(1, 4)
        yield replace(
            base, mutation="policy:vmpl", detail=f"vmpl {vmpl}", policy=replace(policy, vmpl=vmpl)
        )
    else:
        yield replace(
            base,
            mutation="policy:smt-forbidden",
            detail="SMT not allowed",
            policy=replace(policy, allow_smt=False),
        )


def _tdx_layout(quote: bytes) -> tuple[int, int] | None:
    """(body offset, signature data offset) of a quote that parses, else None."""
    try:
        parsed = Quote.from_bytes(quote)
    except AttestationError:
        return None
    signed = len(parsed.signed_bytes)
    body_offset = 48 if parsed.header.version == 4 else 54
    return body_offset, signed + 4


def _tdx_mutations(base: Case, others: list[Case], rng: random.Random) -> Iterator[Case]:
    """Endless mutations of one TDX base case, a random class each time."""
    assert isinstance(base.policy, TdxPolicy)
    quote = base.evidence
    layout = _tdx_layout(quote)
    while True:
        choice = rng.random()
        if choice < 0.30:
            evidence, detail = _flip(quote, rng, rng.choice((1, 1, 2, 3)))
            yield replace(base, mutation="bitflip:quote", detail=detail, evidence=evidence)
        elif choice < 0.45 and layout is not None:
            body, signature = layout
            fields = {f"body.{k}": (body + o, s) for k, (o, s) in TDX_BODY_FIELDS.items()}
            fields |= {f"sig.{k}": (signature + o, s) for k, (o, s) in TDX_SIGNATURE_FIELDS.items()}
            fields |= {
                "header.version": (0, 2),
                "header.key_type": (2, 2),
                "header.tee_type": (4, 4),
                "header.qe_vendor_id": (12, 16),
                "header.user_data": (28, 20),
                "signature_data_length": (signature - 4, 4),
            }
            name = rng.choice(list(fields))
            offset, size = fields[name]
            evidence, detail = _edit(quote, offset, size, rng)
            yield replace(base, mutation=f"field:{name}", detail=detail, evidence=evidence)
        elif choice < 0.52 and layout is not None:
            edited = _pck_chain_edit(quote, layout[1], rng)
            if edited is not None:
                evidence, detail = edited
                yield replace(base, mutation="field:pck-chain", detail=detail, evidence=evidence)
        elif choice < 0.57:
            extra = rng.choice((b"\x00", b"junk", bytes(rng.randrange(1, 64))))
            cut = rng.random() < 0.5 and len(quote) > 1
            evidence = quote[: rng.randrange(len(quote))] if cut else quote + extra
            detail = f"cut to {len(evidence)}" if cut else f"+{len(extra)} trailing bytes"
            yield replace(base, mutation="length", detail=detail, evidence=evidence)
        elif choice < 0.80 and base.collateral is not None:
            yield from _collateral_mutation(base, base.collateral, others, rng)
        else:
            yield from _tdx_policy_variation(base, others, rng)


def _pck_chain_edit(quote: bytes, signature: int, rng: random.Random) -> tuple[bytes, str] | None:
    """Edit the PEM PCK chain inside the quote and fix up every length around it."""
    auth_length = struct.unpack_from("<H", quote, signature + 582)[0]
    inner = signature + 584 + auth_length  # inner certification type (u16), size (u32), PEM
    if len(quote) < inner + 6:
        return None
    pem_size = struct.unpack_from("<I", quote, inner + 2)[0]
    pem = quote[inner + 6 : inner + 6 + pem_size]
    blocks = re.findall(rb"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n?", pem, re.S)
    kind = rng.randrange(6)
    if kind == 0:
        new_pem, detail = pem.rstrip(b"\x00"), "trailing NUL removed"
    elif kind == 1:
        new_pem, detail = pem + b"\n", "newline appended"
    elif kind == 2 and len(blocks) == 3:
        new_pem, detail = blocks[0] + blocks[1], "root certificate dropped"
    elif kind == 3 and len(blocks) == 3:
        new_pem, detail = blocks[1] + blocks[0] + blocks[2], "leaf and CA swapped"
    elif kind == 4 and len(blocks) == 3:
        new_pem, detail = b"".join(blocks) + blocks[2], "root certificate twice"
    else:
        position = rng.randrange(len(pem))
        mutable = bytearray(pem)
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123456789+/"
        mutable[position] = ord(rng.choice([c for c in alphabet if ord(c) != pem[position]]))
        new_pem, detail = bytes(mutable), f"PEM character {position}"
    delta = len(new_pem) - len(pem)
    edited = bytearray(quote[: inner + 6] + new_pem + quote[inner + 6 + pem_size :])
    struct.pack_into("<I", edited, inner + 2, pem_size + delta)
    outer_size = struct.unpack_from("<I", edited, signature + 130)[0]
    struct.pack_into("<I", edited, signature + 130, outer_size + delta)
    total = struct.unpack_from("<I", edited, signature - 4)[0]
    struct.pack_into("<I", edited, signature - 4, total + delta)
    return bytes(edited), detail


def _json_field_edit(document: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Rewrite a value in a signed JSON body: a status, a date, an SVN, an FMSPC, the signature."""
    edits: list[tuple[bytes, bytes]] = [
        (b'"UpToDate"', b'"OutOfDate"'),
        (b'"OutOfDate"', b'"UpToDate"'),
        (b'"SWHardeningNeeded"', b'"UpToDate"'),
        (b'"Revoked"', b'"UpToDate"'),
    ]
    candidates: list[tuple[str, int, int, bytes]] = []
    for old, new in edits:
        for match in re.finditer(re.escape(old), document):
            candidates.append((f"{old.decode()}→{new.decode()}", match.start(), len(old), new))
    for match in re.finditer(rb'"(nextUpdate|issueDate)":"(\d{4})', document):
        year = int(match.group(2)) + rng.choice((-3, -1, 1, 10))
        candidates.append(
            (f"{match.group(1).decode()} year {year}", match.start(2), 4, str(year).encode())
        )
    for match in re.finditer(
        rb'"(isvsvn|pcesvn|svn|tcbEvaluationDataNumber|version)":(\d+)', document
    ):
        value = str(int(match.group(2)) + rng.choice((-1, 1, 100))).encode()
        candidates.append((f"{match.group(1).decode()} := {value.decode()}", match.start(2),
                           len(match.group(2)), value))  # fmt: skip
    for match in re.finditer(rb'"fmspc":"([0-9A-Fa-f]{12})"', document):
        candidates.append(("fmspc", match.start(1), 12, b"00906ED50000"))
    for match in re.finditer(rb'"signature":"([0-9a-f]+)"', document):
        position = match.start(1) + rng.randrange(len(match.group(1)))
        digit = rng.choice([c for c in b"0123456789abcdef" if c != document[position]])
        candidates.append((f"signature digit {position}", position, 1, bytes([digit])))
    if not candidates:
        return _flip(document, rng)
    detail, offset, size, new = rng.choice(candidates)
    return document[:offset] + new + document[offset + size :], detail


def _crl_edit(der: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Edit a CRL in place: a digit of thisUpdate/nextUpdate/a revocation date, or a byte of a
    revoked serial number (an INTEGER followed by its revocation date)."""
    targets: list[tuple[str, int, int]] = []
    for match in re.finditer(rb"\x17\x0d\d{12}Z", der):
        targets.append(("time", match.start() + 2, 12))
    for match in re.finditer(rb"\x02([\x01-\x14])", der):
        length = match[1][0]
        end = match.end() + length
        if end < len(der) and der[end] == 0x17:
            targets.append(("serial", match.end(), length))
    if not targets:
        return _flip(der, rng)
    what, offset, size = rng.choice(targets)
    index = offset + rng.randrange(size)
    if what == "time":
        digit = rng.choice([d for d in b"0123456789" if d != der[index]])
    else:
        digit = rng.choice([v for v in range(256) if v != der[index]])
    return der[:index] + bytes([digit]) + der[index + 1 :], f"{what} byte {index:#x}"


def _collateral_mutation(
    base: Case, collateral: dict[str, bytes], others: list[Case], rng: random.Random
) -> Iterator[Case]:
    key = rng.choice(list(collateral))
    choice = rng.random()
    if choice < 0.35:
        edited, detail = _flip(collateral[key], rng)
        mutation = f"bitflip:{key}"
    elif choice < 0.75 and key in ("tcb_info", "qe_identity"):
        edited, detail = _json_field_edit(collateral[key], rng)
        mutation = f"field:{key}"
    elif choice < 0.75 and key.endswith("crl"):
        edited, detail = _crl_edit(collateral[key], rng)
        mutation = f"field:{key}"
    elif choice < 0.85 and key == "tcb_signing_chain":
        name = rng.choice(("tcb_signing_chain_2018.pem", "tcb_signing_chain_2025.pem"))
        edited, detail = (ROOTS / "intel" / name).read_bytes(), name
        mutation = "swap:tcb_signing_chain"
    else:
        donors = [o for o in others if o.collateral is not None and key in o.collateral]
        if not donors:
            return
        donor = rng.choice(donors)
        assert donor.collateral is not None
        edited, detail = donor.collateral[key], f"{key} of {donor.base}"
        mutation = f"swap:{key}"
    yield replace(base, mutation=mutation, detail=detail, collateral={**collateral, key: edited})


def _tdx_policy_variation(base: Case, others: list[Case], rng: random.Random) -> Iterator[Case]:
    assert isinstance(base.policy, TdxPolicy)
    choice = rng.randrange(6)
    if choice == 5:
        edges = _tdx_edges(base)
        if edges:
            what, edge = rng.choice(edges)
            offset = rng.choice((-1, 0, 1))
            when = edge + timedelta(seconds=offset)
            yield replace(base, mutation="policy:edge", detail=f"{what} {offset:+d} s", now=when)
    elif choice == 0:
        when = base.now + timedelta(days=rng.choice((-3650, -400, -40, -1, 1, 20, 40, 400, 3650)))
        yield replace(base, mutation="policy:now", detail=str(when), now=when)
    elif choice == 1:
        donors = [o for o in others if o.collateral is not None and o.base != base.base]
        if donors:
            donor = rng.choice(donors)
            yield replace(
                base, mutation="swap:collateral", detail=f"collateral of {donor.base}",
                collateral=donor.collateral, policy=replace(base.policy, up_to_date_only=True),
            )  # fmt: skip
    elif choice == 2:
        yield replace(
            base, mutation="policy:no-collateral", detail="no collateral", collateral=None,
            policy=replace(base.policy, up_to_date_only=False),
        )  # fmt: skip
    elif choice == 3:
        other = rng.choice(others)
        yield replace(
            base, mutation="swap:quote", detail=f"quote of {other.base}", evidence=other.evidence
        )
    else:
        yield replace(
            base,
            mutation="policy:allow-debug",
            detail="debug allowed",
            policy=replace(base.policy, allow_debug=True),
        )


def _tdx_edges(case: Case) -> list[tuple[str, datetime]]:
    """The instants at which something in the case becomes or stops being valid."""
    edges: list[tuple[str, datetime]] = []
    try:
        chain = Quote.from_bytes(case.evidence).signature_data.pck_chain_pem
    except AttestationError:
        chain = None
    if chain:
        for name, certificate in zip(("PCK", "PCK CA"), load_certificates(chain), strict=False):
            edges += [(f"{name} notBefore", certificate.not_valid_before_utc),
                      (f"{name} notAfter", certificate.not_valid_after_utc)]  # fmt: skip
    for key, document in (case.collateral or {}).items():
        if key in ("tcb_info", "qe_identity"):
            for match in re.finditer(rb'"(issueDate|nextUpdate)":"([^"]+)"', document):
                edges.append((f"{key} {match[1].decode()}", parse_time(match[2].decode())))
        elif key.endswith("crl"):
            crl = x509.load_der_x509_crl(document)
            edges.append((f"{key} thisUpdate", crl.last_update_utc))
            if crl.next_update_utc is not None:
                edges.append((f"{key} nextUpdate", crl.next_update_utc))
    return edges


def mutated_cases(count: int, seed: int) -> Iterator[Case]:
    """`count` mutations, spread evenly over the base vectors, reproducible from `seed`."""
    bases = real_cases()
    snp = [c for c in bases if c.kind == "snp"]
    tdx = [c for c in bases if c.kind == "tdx"]
    rng = random.Random(seed)
    streams: list[tuple[Case, Iterator[Case]]] = []
    for base in bases:
        stream_rng = random.Random(rng.getrandbits(64))
        if base.kind == "snp":
            streams.append((base, _snp_mutations(base, snp, stream_rng)))
        else:
            streams.append((base, _tdx_mutations(base, tdx, stream_rng)))
    for index in range(count):
        base, stream = streams[index % len(streams)]
        case = next(stream)
        if _is_debug(base) and rng.random() < 0.5:
            # Else every variation of a debug guest ends at "debug refused" on both sides.
            case = replace(case, policy=replace(case.policy, allow_debug=True))
        yield replace(case, id=f"{base.base}#{index}")


def _is_debug(case: Case) -> bool:
    if isinstance(case.policy, TdxPolicy):
        return bool(case.policy.td_attributes[0] & 1)
    try:
        return Report.from_bytes(case.evidence, product=None).policy.debug
    except AttestationError:
        return False


# Running both sides.


@dataclass
class Disagreement:
    case: Case
    ours: Verdict
    google: Verdict
    known: str | None


@dataclass
class Summary:
    inputs: int = 0
    agreements: int = 0
    both_accept: int = 0
    by_mutation: Counter[str] = field(default_factory=Counter)
    accepted_by_mutation: Counter[str] = field(default_factory=Counter)
    crashes: list[tuple[Case, Verdict, Verdict]] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    # Every (case, ours, Google) when run with keep=True (the short tests look at them).
    results: list[tuple[Case, Verdict, Verdict]] = field(default_factory=list)

    def classes(self) -> dict[tuple[str, ...], list[Disagreement]]:
        """Disagreements grouped by kind, mutation class, who accepted and the reasons' gist."""
        grouped: dict[tuple[str, ...], list[Disagreement]] = {}
        for item in self.disagreements:
            key = (
                item.case.kind,
                item.case.mutation,
                "ours accepts" if item.ours.ok else "Google accepts",
                _gist(item.ours.reason),
                _gist(item.google.reason),
            )
            grouped.setdefault(key, []).append(item)
        return grouped

    @property
    def unknown(self) -> list[Disagreement]:
        return [d for d in self.disagreements if d.known is None]


def _gist(reason: str) -> str:
    text = re.sub(r"[0-9a-fA-F]{8,}", "…", reason)
    text = re.sub(r"\d+", "N", text)
    return text[:110]


def run(cases: Iterable[Case], driver: Path, *, keep: bool = False) -> Summary:
    """Feed the cases to the Go driver (in a thread) while ours runs here; compare in order."""
    process = subprocess.Popen(
        [str(driver), "-roots", str(ROOTS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1 << 16,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    pending: list[Case] = []
    lock = threading.Condition()
    done = False
    failure: list[BaseException] = []

    def feed() -> None:
        nonlocal done
        try:
            assert process.stdin is not None
            for case in cases:
                with lock:
                    pending.append(case)
                    lock.notify()
                process.stdin.write(case.to_json() + "\n")
            process.stdin.close()
        except BaseException as error:  # surfaced by the reader below
            failure.append(error)
        finally:
            with lock:
                done = True
                lock.notify()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    summary = Summary()
    while True:
        with lock:
            while not pending and not done:
                lock.wait()
            if not pending:
                break
            case = pending.pop(0)
        our = ours(case)
        line = process.stdout.readline()
        if not line:
            stderr = process.stderr.read() if process.stderr else ""
            raise RuntimeError(f"the Go driver stopped early: {stderr.strip()}")
        answer = json.loads(line)
        if answer["id"] != case.id:
            raise RuntimeError(f"the Go driver answered {answer['id']} for {case.id}")
        google = Verdict(bool(answer["ok"]), str(answer["reason"]))
        _tally(summary, case, our, google)
        if keep:
            summary.results.append((case, our, google))
    feeder.join()
    process.wait()
    if failure:
        raise failure[0]
    return summary


def _tally(summary: Summary, case: Case, our: Verdict, google: Verdict) -> None:
    summary.inputs += 1
    summary.by_mutation[case.mutation] += 1
    if our.reason.startswith("crash:") or google.reason.startswith("panic:"):
        summary.crashes.append((case, our, google))
    if our.ok == google.ok:
        summary.agreements += 1
        if our.ok:
            summary.both_accept += 1
            summary.accepted_by_mutation[case.mutation] += 1
        return
    summary.disagreements.append(
        Disagreement(case, our, google, known_difference(case, our, google))
    )


def report(summary: Summary, *, examples: int = 1) -> str:
    """The result as text: inputs, agreements, each class of disagreement with an example."""
    lines = [
        f"inputs run: {summary.inputs}",
        f"agreements: {summary.agreements} ({summary.both_accept} accepted by both)",
        f"disagreements: {len(summary.disagreements)} in {len(summary.classes())} classes"
        f" ({len(summary.unknown)} not in KNOWN_DIFFERENCES)",
        f"crashes (ours) or panics (Google): {len(summary.crashes)}",
        "accepted by both, per mutation class: "
        + ", ".join(f"{k} {v}" for k, v in sorted(summary.accepted_by_mutation.items())),
    ]
    by_difference = Counter(d.known or "NOT KNOWN" for d in summary.disagreements)
    lines.append("disagreements per documented difference:")
    lines += [f"  {count:6d}  {name}" for name, count in by_difference.most_common()]
    panics = sum(1 for _, _, google in summary.crashes if google.reason.startswith("panic:"))
    lines.append(f"Google panics (recovered; ours refused each): {panics}")
    for (kind, mutation, who, our_gist, google_gist), items in sorted(
        summary.classes().items(), key=lambda kv: -len(kv[1])
    ):
        known = items[0].known or "NOT KNOWN"
        lines.append(f"- [{known}] {kind} {mutation}: {who}, {len(items)} inputs")
        lines.append(f"    ours:   {our_gist}")
        lines.append(f"    Google: {google_gist}")
        for item in items[:examples]:
            lines.append(f"    e.g. {item.case.id} ({item.case.detail}, at {item.case.now})")
    for case, our, google in summary.crashes[: examples * 5]:
        lines.append(f"- crash/panic {case.id} ({case.mutation} {case.detail})")
        lines.append(f"    ours:   {our.reason[:150]}")
        lines.append(f"    Google: {google.reason[:150]}")
    return "\n".join(lines)
