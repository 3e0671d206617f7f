"""A client for AMD's Key Distribution Service (KDS): VCEKs, the ASK/ASVK + ARK chains and CRLs.

URLs per AMD's "VCEK Certificate and KDS Interface Specification" as Contrast and go-sev-guest
use them (research/attestation.md §2.3):

    VCEK        /vcek/v1/{Milan|Genoa}/{hex(CHIP_ID), 64 bytes}?blSPL=&teeSPL=&snpSPL=&ucodeSPL=
                /vcek/v1/Turin/{hex(CHIP_ID[0:8])}?fmcSPL=&blSPL=&teeSPL=&snpSPL=&ucodeSPL=
    chain       /vcek/v1/{product}/cert_chain   PEM: ASK, then ARK
                /vlek/v1/{product}/cert_chain   PEM: ASVK, then ARK
    CRL         /vcek/v1/{product}/crl          DER, signed by the ARK (/vlek/v1/... likewise)

The KDS rate-limits its clients and VCEKs never change for a chip and TCB, so like Contrast's
`certcache` everything is cache-first and the network is used only on a miss. The one exception
is the CRL: it is refetched once its nextUpdate has passed, and when that fails the cached copy is
returned with a warning (whether a stale CRL is acceptable is the verifier's decision, at its own
`now`). Nothing here checks signatures: the verifier pins the AMD roots and checks the chain.

The client takes the product as a string and the TCB as plain integers (the fields of
`report.TcbVersion`), so it depends on no parsing module.
"""

from __future__ import annotations

import http
import http.client
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from email.message import Message
from pathlib import Path
from typing import TypeVar

from cryptography import x509

from contrast.attestation import certificates
from contrast.attestation.errors import (
    AttestationPackageError,
    EvidenceUnavailable,
    MalformedEvidence,
    Reason,
)
from contrast.files import write_atomically

log = logging.getLogger(__name__)

T = TypeVar("T")

KDS_BASE_URL = "https://kdsintf.amd.com"
PRODUCTS = ("Milan", "Genoa", "Turin")
KEY_KINDS = ("vcek", "vlek")
CHIP_ID_SIZE = 64
TURIN_HW_ID_SIZE = 8
# SPLs are one byte each in a TCB_VERSION.
_SPL_RANGE = range(256)

DEFAULT_TIMEOUT = 20.0
DEFAULT_ATTEMPTS = 4
DEFAULT_BACKOFF = 1.0
# Contrast's getter waits at most 30 s between attempts.
MAX_DELAY = 30.0
_FETCH_HINT = "check network access to kdsintf.amd.com, or send the certificates with the evidence"


@dataclass(frozen=True)
class HttpResponse:
    """An HTTP answer of any status; transport failures are OSError instead."""

    status: int
    body: bytes
    # Seconds from a numeric Retry-After header (429, 503), if any.
    retry_after: float | None = None


# GET a URL. Raises OSError when no HTTP answer arrives (DNS, refused, timeout, reset).
Fetch = Callable[[str], HttpResponse]


class UrllibFetch:
    """`Fetch` over urllib, honouring the usual proxy environment variables."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout

    def __call__(self, url: str) -> HttpResponse:
        # KdsClient accepts only http(s) base URLs, so urllib's file:// and ftp:// never apply.
        request = urllib.request.Request(url, headers={"User-Agent": "contrast-python"})  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                return HttpResponse(response.status, response.read())
        except urllib.error.HTTPError as error:
            with error:
                return HttpResponse(error.code, error.read(), _retry_after(error.headers))
        except http.client.HTTPException as error:
            # A broken HTTP exchange (truncated body, bad status line) is a transport failure.
            raise ConnectionError(f"{type(error).__name__}: {error}") from None


def _retry_after(headers: Message) -> float | None:
    """A Retry-After in seconds; the HTTP-date form is ignored (the backoff applies instead)."""
    value = headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class KdsClient:
    """Cache-first access to the AMD KDS.

    `cache_dir` None keeps results in memory for the life of the client; otherwise each result is
    a file under it, written atomically, named by key kind, product, hwID and TCB.
    """

    def __init__(
        self,
        cache_dir: Path | None,
        *,
        base_url: str = KDS_BASE_URL,
        fetch: Fetch | None = None,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff: float = DEFAULT_BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not base_url.startswith(("https://", "http://")):
            raise AttestationPackageError(f"the KDS URL must be http(s), got {base_url!r}")
        if attempts < 1:
            raise AttestationPackageError(f"attempts must be at least 1, got {attempts}")
        self.cache_dir = cache_dir
        self.base_url = base_url.rstrip("/")
        self.fetch = fetch or UrllibFetch()
        self.attempts = attempts
        self.backoff = backoff
        self.sleep = sleep
        self._memory: dict[str, bytes] = {}

    # URLs and cache names.

    def vcek_url(
        self,
        product: str,
        chip_id: bytes,
        *,
        bootloader: int,
        tee: int,
        snp: int,
        microcode: int,
        fmc: int | None = None,
    ) -> str:
        """The VCEK URL for a chip at a TCB (hwID and query as the product requires)."""
        return self.base_url + _vcek_path(
            product,
            chip_id,
            bootloader=bootloader,
            tee=tee,
            snp=snp,
            microcode=microcode,
            fmc=fmc,
        )

    # Endorsements.

    def vcek(
        self,
        product: str,
        chip_id: bytes,
        *,
        bootloader: int,
        tee: int,
        snp: int,
        microcode: int,
        fmc: int | None = None,
    ) -> x509.Certificate:
        """The VCEK of `chip_id` (a report's CHIP_ID, or Turin's 8-byte hwID) at a TCB.

        Raises EvidenceUnavailable(FETCH_FAILED) when the KDS cannot be reached or has no such
        VCEK, MalformedEvidence when it answers with something that is not a certificate.
        """
        path = _vcek_path(
            product,
            chip_id,
            bootloader=bootloader,
            tee=tee,
            snp=snp,
            microcode=microcode,
            fmc=fmc,
        )
        hw_id = _hw_id(str(product), chip_id)
        name = f"bl{bootloader}_tee{tee}_snp{snp}_ucode{microcode}"
        if fmc is not None:
            name += f"_fmc{fmc}"
        cache_name = f"vcek/{product}/{hw_id.hex()}/{name}.der"

        def parse(data: bytes) -> x509.Certificate:
            return certificates.load_certificate(data, what=f"the VCEK from {self.base_url}")

        return self._cached(cache_name, path, parse, not_found_hint=_VCEK_404_HINT)

    def cert_chain(
        self, product: str, *, key: str = "vcek"
    ) -> tuple[x509.Certificate, x509.Certificate]:
        """(ASK, ARK) for `key` "vcek", (ASVK, ARK) for "vlek", as the KDS serves them."""
        _check_product(product)
        _check_key(key)
        path = f"/{key}/v1/{product}/cert_chain"

        def parse(data: bytes) -> tuple[x509.Certificate, x509.Certificate]:
            what = f"the {key.upper()} certificate chain from {self.base_url}"
            chain = certificates.load_certificates(data, what=what)
            if len(chain) != 2:
                raise MalformedEvidence(
                    Reason.MALFORMED_CERTIFICATE,
                    f"{what}: expected 2 certificates (intermediate, ARK), found {len(chain)}",
                )
            return chain[0], chain[1]

        return self._cached(f"{key}/{product}/cert_chain.pem", path, parse)

    def crl(
        self, product: str, *, now: datetime, key: str = "vcek"
    ) -> x509.CertificateRevocationList:
        """The CRL AMD's ARK signs for `product`, refetched once its nextUpdate is before `now`.

        When the refetch fails, a cached CRL is returned (and a warning logged); without one the
        failure is raised.
        """
        _check_product(product)
        _check_key(key)
        path = f"/{key}/v1/{product}/crl"
        cache_name = f"{key}/{product}/crl.der"
        what = f"the {key.upper()} CRL for {product} from {self.base_url}"

        cached = self._load_cached(
            cache_name, lambda data: certificates.load_crl(data, what=f"the cached {what}")
        )
        next_update = cached.next_update_utc if cached is not None else None
        if cached is not None and next_update is not None and now <= next_update:
            return cached
        try:
            data = self._get(path)
            fresh = certificates.load_crl(data, what=what)
        except (EvidenceUnavailable, MalformedEvidence) as error:
            if cached is None:
                raise
            log.warning("%s; using the cached CRL (next update %s)", error, cached.next_update_utc)
            return cached
        self._store(cache_name, data)
        return fresh

    # Cache and network.

    def _cached(
        self,
        cache_name: str,
        path: str,
        parse: Callable[[bytes], T],
        *,
        not_found_hint: str | None = None,
    ) -> T:
        cached = self._load_cached(cache_name, parse)
        if cached is not None:
            return cached
        data = self._get(path, not_found_hint=not_found_hint)
        result = parse(data)
        self._store(cache_name, data)
        return result

    def _load_cached(self, cache_name: str, parse: Callable[[bytes], T]) -> T | None:
        data = self._read(cache_name)
        if data is None:
            return None
        try:
            return parse(data)
        except MalformedEvidence as error:
            log.warning("ignoring a broken KDS cache entry %s: %s", cache_name, error)
            return None

    def _read(self, cache_name: str) -> bytes | None:
        if self.cache_dir is None:
            return self._memory.get(cache_name)
        try:
            return (self.cache_dir / cache_name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            log.warning("cannot read the KDS cache entry %s: %s", cache_name, error)
            return None

    def _store(self, cache_name: str, data: bytes) -> None:
        if self.cache_dir is None:
            self._memory[cache_name] = data
            return
        try:
            write_atomically(self.cache_dir / cache_name, data)
        except OSError as error:
            # The cache saves requests; failing to fill it must not fail the caller.
            log.warning("cannot write the KDS cache entry %s: %s", cache_name, error)

    def _get(self, path: str, *, not_found_hint: str | None = None) -> bytes:
        """GET with retries on transport failures, 429 and 5xx; other statuses fail at once."""
        url = self.base_url + path
        failure = ""
        for attempt in range(self.attempts):
            delay = self.backoff * 2**attempt
            try:
                response = self.fetch(url)
            except OSError as error:
                failure = f"could not reach the AMD KDS at {url}: {error}"
            else:
                if response.status == http.HTTPStatus.OK:
                    return response.body
                failure = f"the AMD KDS answered {_status(response.status)} for {url}"
                if not _retryable(response.status):
                    hint = not_found_hint if response.status == http.HTTPStatus.NOT_FOUND else None
                    raise EvidenceUnavailable(
                        Reason.FETCH_FAILED, failure, hint=hint or _FETCH_HINT
                    )
                delay = max(delay, response.retry_after or 0.0)
            if attempt + 1 < self.attempts:
                log.info("%s; retrying in %.1f s", failure, min(delay, MAX_DELAY))
                self.sleep(min(delay, MAX_DELAY))
        raise EvidenceUnavailable(
            Reason.FETCH_FAILED,
            f"{failure} (after {self.attempts} attempts)",
            hint=_FETCH_HINT,
        )


_VCEK_404_HINT = (
    "the KDS has no VCEK for this product, chip and TCB: check the product and the report's"
    " REPORTED_TCB and CHIP_ID"
)


def _retryable(status: int) -> bool:
    return status == http.HTTPStatus.TOO_MANY_REQUESTS or 500 <= status < 600


def _status(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _check_product(product: str) -> None:
    if str(product) not in PRODUCTS:
        raise AttestationPackageError(
            f"the AMD KDS serves {', '.join(PRODUCTS)}, not {str(product)!r}",
            hint="name the product as the report's CPUID or the VCEK's productName gives it",
        )


def _check_key(key: str) -> None:
    if key not in KEY_KINDS:
        raise AttestationPackageError(f"the KDS key kind is 'vcek' or 'vlek', not {key!r}")


def _hw_id(product: str, chip_id: bytes) -> bytes:
    """The hwID the KDS files a VCEK under: all of CHIP_ID, or its first 8 bytes on Turin."""
    if product == "Turin":
        if len(chip_id) not in (TURIN_HW_ID_SIZE, CHIP_ID_SIZE):
            raise AttestationPackageError(
                f"a Turin chip id is {CHIP_ID_SIZE} bytes (or its {TURIN_HW_ID_SIZE}-byte"
                f" hwID), got {len(chip_id)}"
            )
        hw_id = bytes(chip_id[:TURIN_HW_ID_SIZE])
    else:
        if len(chip_id) != CHIP_ID_SIZE:
            raise AttestationPackageError(
                f"a {product} chip id is {CHIP_ID_SIZE} bytes, got {len(chip_id)}"
            )
        hw_id = bytes(chip_id)
    if not any(hw_id):
        raise EvidenceUnavailable(
            Reason.FETCH_FAILED,
            "the chip id is all zero (MASK_CHIP_ID is set), so the KDS cannot say which VCEK",
            hint="send the VCEK with the evidence (extended report), or unmask the chip id",
        )
    return hw_id


def _vcek_path(
    product: str,
    chip_id: bytes,
    *,
    bootloader: int,
    tee: int,
    snp: int,
    microcode: int,
    fmc: int | None,
) -> str:
    _check_product(product)
    product = str(product)
    spls = {"blSPL": bootloader, "teeSPL": tee, "snpSPL": snp, "ucodeSPL": microcode}
    if product == "Turin":
        if fmc is None:
            raise AttestationPackageError("a Turin VCEK is filed under an FMC SPL too: pass fmc")
        spls = {"fmcSPL": fmc, **spls}
    elif fmc is not None:
        raise AttestationPackageError(
            f"{product} has no FMC SPL (only Turin and later do): pass fmc=None"
        )
    for name, value in spls.items():
        if value not in _SPL_RANGE:
            raise AttestationPackageError(f"{name} must be 0 to 255, got {value}")
    query = "&".join(f"{name}={value}" for name, value in spls.items())
    return f"/vcek/v1/{product}/{_hw_id(product, chip_id).hex()}?{query}"
