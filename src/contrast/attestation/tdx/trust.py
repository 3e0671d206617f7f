"""What the TDX verifier trusts: Intel's SGX Root CA and its TCB Signing certificates.

The root anchors every PCK chain, CRL and collateral signature. The TCB Signing certificates sign
TCB info and QE identity; Intel re-issued the 2018 one in 2025 with the same key and serial, so
the store holds both and `tcb_signing_at` picks those valid at the instant checked. The emulated
TEE builds a store from its own hierarchy; the verifier code is the same, only this object
differs, and `genuine` tells the two apart.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes

from contrast.attestation.certificates import load_certificate, load_certificates


@dataclass(frozen=True)
class IntelRootStore:
    root: x509.Certificate
    tcb_signing: tuple[x509.Certificate, ...] = ()
    # False for the emulated TEE's store: its evidence must never pass as real hardware's.
    genuine: bool = False

    # Derived from `root`; computed once because every verification looks it up.
    root_fingerprint: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root_fingerprint", self.root.fingerprint(hashes.SHA256()))

    def tcb_signing_at(
        self, now: datetime, extra: Iterable[x509.Certificate] = ()
    ) -> list[x509.Certificate]:
        """TCB Signing certificates valid at `now` and issued by the root.

        `extra` are certificates that came with the collateral (its issuer chain); they are
        trusted only if the root signed them, exactly like the built-in ones.
        """
        seen: set[x509.Certificate] = set()
        chosen = []
        for certificate in (*self.tcb_signing, *extra):
            if certificate in seen or certificate == self.root:
                continue
            seen.add(certificate)
            valid = certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc
            if valid and self.issued_by_root(certificate):
                chosen.append(certificate)
        return chosen

    def issued_by_root(self, certificate: x509.Certificate) -> bool:
        key = (self.root, certificate)
        with _issued_lock:
            known = _issued.get(key)
        if known is not None:
            return known
        try:
            certificate.verify_directly_issued_by(self.root)
            issued = True
        except (InvalidSignature, ValueError, TypeError, UnsupportedAlgorithm):
            issued = False
        with _issued_lock:
            _issued[key] = issued
            while len(_issued) > _ISSUED_SIZE:
                _issued.popitem(last=False)
        return issued


# Whether a root signed a certificate never changes: remembered, as every collateral check asks.
_ISSUED_SIZE = 64
_issued: OrderedDict[tuple[x509.Certificate, x509.Certificate], bool] = OrderedDict()
_issued_lock = threading.Lock()


@cache
def genuine_intel_roots() -> IntelRootStore:
    # From the package's folder, as AMD's roots are (snp/trust.py): importlib.resources would
    # load tempfile and zipfile, 5 ms of evidence verify.
    folder = Path(__file__).parent / "roots"
    root = load_certificate((folder / "sgx_root_ca.pem").read_bytes(), what="Intel SGX Root CA")
    signing: list[x509.Certificate] = []
    for name in ("tcb_signing_2018.pem", "tcb_signing_2025.pem"):
        signing += load_certificates((folder / name).read_bytes(), what="Intel TCB Signing")
    return IntelRootStore(root, tuple(signing), genuine=True)


GENUINE_INTEL_ROOTS = genuine_intel_roots()
