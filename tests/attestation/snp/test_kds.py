"""The KDS client against a loopback HTTP server serving real AMD certificates."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.attestation import certificates
from contrast.attestation.errors import EvidenceUnavailable, MalformedEvidence, Reason
from contrast.attestation.snp import kds
from contrast.errors import ContrastError
from tests.conftest import ATTESTATION_DATA, REPO, require_shared

MILAN_VECTOR = ATTESTATION_DATA / "snp" / "oak-milan-v3-rk-release"
TURIN_VECTOR = ATTESTATION_DATA / "snp" / "virtee-turin-vcek-only"
MILAN_ROOTS = REPO / "src" / "contrast" / "attestation" / "snp" / "roots" / "milan"
NOW = datetime(2025, 6, 1, tzinfo=UTC)


@dataclass
class KdsServer:
    """A loopback KDS: each path (with query) answers from a list; the last answer repeats."""

    url: str = ""
    routes: dict[str, list[tuple[int, bytes, dict[str, str]]]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)

    def serve(
        self, path: str, *answers: tuple[int, bytes] | tuple[int, bytes, dict[str, str]]
    ) -> None:
        """Answer `path` with `answers` in turn: (status, body) or (status, body, headers)."""
        self.routes[path] = [
            (answer[0], answer[1], answer[2] if len(answer) == 3 else {}) for answer in answers
        ]


@pytest.fixture
def server() -> Iterator[KdsServer]:
    state = KdsServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append(self.path)
            answers = state.routes.get(self.path) or [(404, b"Not Found", {})]
            status, body, headers = answers.pop(0) if len(answers) > 1 else answers[0]
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    # A short poll interval keeps shutdown (and so each test) fast.
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib honours proxy variables; the loopback server must be reached directly."""
    require_shared()
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")


@pytest.fixture
def sleeps() -> list[float]:
    return []


def client(
    server: KdsServer,
    cache_dir: Path | None,
    sleeps: list[float],
    *,
    attempts: int = kds.DEFAULT_ATTEMPTS,
    backoff: float = kds.DEFAULT_BACKOFF,
) -> kds.KdsClient:
    """A client of the loopback server that records its back-off delays instead of sleeping."""
    return kds.KdsClient(
        cache_dir, base_url=server.url, attempts=attempts, backoff=backoff, sleep=sleeps.append
    )


def milan() -> tuple[bytes, dict[str, int], bytes]:
    expected = json.loads((MILAN_VECTOR / "expected.json").read_text())
    tcb = expected["report"]["reported_tcb"]
    spls = {
        "bootloader": tcb["bl"],
        "tee": tcb["tee"],
        "snp": tcb["snp"],
        "microcode": tcb["ucode"],
    }
    return (
        bytes.fromhex(expected["report"]["chip_id"]),
        spls,
        (MILAN_VECTOR / "vcek.der").read_bytes(),
    )


MILAN_PATH_TCB = "?blSPL=4&teeSPL=0&snpSPL=24&ucodeSPL=219"


def milan_path() -> str:
    chip_id, _, _ = milan()
    return f"/vcek/v1/Milan/{chip_id.hex()}{MILAN_PATH_TCB}"


def milan_chain_pem() -> bytes:
    return (MILAN_ROOTS / "ask.pem").read_bytes() + (MILAN_ROOTS / "ark.pem").read_bytes()


def test_vcek_urls() -> None:
    chip_id, spls, _ = milan()
    client_ = kds.KdsClient(None)
    assert client_.vcek_url("Milan", chip_id, **spls) == (
        f"https://kdsintf.amd.com/vcek/v1/Milan/{chip_id.hex()}{MILAN_PATH_TCB}"
    )
    turin_spls = {"bootloader": 1, "tee": 0, "snp": 2, "microcode": 71, "fmc": 0}
    turin_chip = bytes.fromhex("3b42092f69c656d3") + bytes(range(1, 57))
    assert client_.vcek_url("Turin", turin_chip, **turin_spls) == (
        "https://kdsintf.amd.com/vcek/v1/Turin/3b42092f69c656d3"
        "?fmcSPL=0&blSPL=1&teeSPL=0&snpSPL=2&ucodeSPL=71"
    )
    assert client_.vcek_url("Turin", turin_chip[:8], **turin_spls) == client_.vcek_url(
        "Turin", turin_chip, **turin_spls
    )


def test_vcek_is_fetched_once_and_cached_on_disk(
    server: KdsServer, tmp_path: Path, sleeps: list[float]
) -> None:
    chip_id, spls, vcek_der = milan()
    server.serve(milan_path(), (200, vcek_der))

    first = client(server, tmp_path, sleeps).vcek("Milan", chip_id, **spls)
    second = client(server, tmp_path, sleeps).vcek("Milan", chip_id, **spls)

    assert server.requests == [milan_path()]
    assert first.public_bytes(serialization.Encoding.DER) == vcek_der
    assert certificates.same_certificate(first, second)
    cache_file = tmp_path / "vcek" / "Milan" / chip_id.hex() / "bl4_tee0_snp24_ucode219.der"
    assert cache_file.read_bytes() == vcek_der
    # Atomic writes leave no temporary files behind.
    assert [path.name for path in cache_file.parent.iterdir()] == [cache_file.name]


def test_turin_vcek_uses_the_8_byte_hw_id_and_fmc(
    server: KdsServer, tmp_path: Path, sleeps: list[float]
) -> None:
    vcek_der = (TURIN_VECTOR / "vcek.der").read_bytes()
    path = "/vcek/v1/Turin/1e550a8ee5cf9f4d?fmcSPL=0&blSPL=0&teeSPL=0&snpSPL=0&ucodeSPL=9"
    server.serve(path, (200, vcek_der))
    chip_id = bytes.fromhex("1e550a8ee5cf9f4d") + b"\xaa" * 56

    vcek = client(server, tmp_path, sleeps).vcek(
        "Turin", chip_id, bootloader=0, tee=0, snp=0, microcode=9, fmc=0
    )

    assert server.requests == [path]
    assert vcek.public_bytes(serialization.Encoding.DER) == vcek_der
    assert (tmp_path / "vcek/Turin/1e550a8ee5cf9f4d/bl0_tee0_snp0_ucode9_fmc0.der").is_file()


def test_memory_cache_without_a_cache_dir(server: KdsServer, sleeps: list[float]) -> None:
    chip_id, spls, vcek_der = milan()
    server.serve(milan_path(), (200, vcek_der))
    kds_client = client(server, None, sleeps)

    kds_client.vcek("Milan", chip_id, **spls)
    kds_client.vcek("Milan", chip_id, **spls)

    assert server.requests == [milan_path()]


@pytest.mark.parametrize("key", ["vcek", "vlek"])
def test_cert_chain(server: KdsServer, tmp_path: Path, sleeps: list[float], key: str) -> None:
    server.serve(f"/{key}/v1/Milan/cert_chain", (200, milan_chain_pem()))

    ask, ark = client(server, tmp_path, sleeps).cert_chain("Milan", key=key)
    client(server, tmp_path, sleeps).cert_chain("Milan", key=key)

    assert server.requests == [f"/{key}/v1/Milan/cert_chain"]
    assert certificates.common_name(ask.subject) == "SEV-Milan"
    assert certificates.common_name(ark.subject) == "ARK-Milan"
    assert (tmp_path / key / "Milan" / "cert_chain.pem").read_bytes() == milan_chain_pem()


def test_cert_chain_with_one_certificate_is_malformed(
    server: KdsServer, tmp_path: Path, sleeps: list[float]
) -> None:
    server.serve("/vcek/v1/Genoa/cert_chain", (200, (MILAN_ROOTS / "ark.pem").read_bytes()))
    with pytest.raises(MalformedEvidence, match="expected 2 certificates"):
        client(server, tmp_path, sleeps).cert_chain("Genoa")


def test_not_found_is_not_retried(server: KdsServer, tmp_path: Path, sleeps: list[float]) -> None:
    chip_id, spls, _ = milan()

    with pytest.raises(EvidenceUnavailable) as raised:
        client(server, tmp_path, sleeps).vcek("Milan", chip_id, **spls)

    error = raised.value
    assert error.reason is Reason.FETCH_FAILED
    assert str(error) == f"the AMD KDS answered 404 Not Found for {server.url}{milan_path()}"
    assert error.hint is not None
    assert "REPORTED_TCB" in error.hint
    assert server.requests == [milan_path()]
    assert sleeps == []


def test_server_error_is_retried_with_backoff(
    server: KdsServer, tmp_path: Path, sleeps: list[float]
) -> None:
    chip_id, spls, vcek_der = milan()
    server.serve(milan_path(), (500, b"oops"), (503, b"later"), (200, vcek_der))

    vcek = client(server, tmp_path, sleeps, backoff=0.5).vcek("Milan", chip_id, **spls)

    assert vcek.public_bytes(serialization.Encoding.DER) == vcek_der
    assert server.requests == [milan_path()] * 3
    assert sleeps == [0.5, 1.0]


def test_rate_limit_honours_retry_after(
    server: KdsServer, tmp_path: Path, sleeps: list[float]
) -> None:
    server.serve(
        "/vcek/v1/Milan/cert_chain",
        (429, b"slow down", {"Retry-After": "7"}),
        (200, milan_chain_pem()),
    )
    client(server, tmp_path, sleeps, backoff=0.5).cert_chain("Milan")
    assert sleeps == [7.0]


def test_retry_after_as_a_date_falls_back_to_the_backoff(
    server: KdsServer, tmp_path: Path, sleeps: list[float]
) -> None:
    server.serve(
        "/vcek/v1/Milan/cert_chain",
        (503, b"later", {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
        (200, milan_chain_pem()),
    )
    client(server, tmp_path, sleeps, backoff=0.5).cert_chain("Milan")
    assert sleeps == [0.5]


def test_persistent_server_error_fails_after_the_attempts(
    server: KdsServer, tmp_path: Path, sleeps: list[float]
) -> None:
    server.serve("/vcek/v1/Milan/cert_chain", (500, b"oops"))

    with pytest.raises(EvidenceUnavailable) as raised:
        client(server, tmp_path, sleeps, attempts=3).cert_chain("Milan")

    assert raised.value.reason is Reason.FETCH_FAILED
    assert str(raised.value) == (
        f"the AMD KDS answered 500 Internal Server Error for {server.url}/vcek/v1/Milan/cert_chain"
        " (after 3 attempts)"
    )
    assert len(server.requests) == 3
    assert len(sleeps) == 2
    assert not (tmp_path / "vcek").exists()


def test_unreachable_server(tmp_path: Path, sleeps: list[float]) -> None:
    # Bind a port and close it again: nothing listens there.
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.server_close()
    kds_client = kds.KdsClient(tmp_path, base_url=url, attempts=2, sleep=sleeps.append)

    with pytest.raises(EvidenceUnavailable) as raised:
        kds_client.cert_chain("Milan")

    assert raised.value.reason is Reason.FETCH_FAILED
    assert f"could not reach the AMD KDS at {url}/vcek/v1/Milan/cert_chain" in str(raised.value)
    assert "(after 2 attempts)" in str(raised.value)
    assert raised.value.hint is not None


def test_garbage_is_malformed_and_not_cached(
    server: KdsServer, tmp_path: Path, sleeps: list[float]
) -> None:
    chip_id, spls, _ = milan()
    server.serve(milan_path(), (200, b"<html>maintenance</html>"))

    with pytest.raises(MalformedEvidence) as raised:
        client(server, tmp_path, sleeps).vcek("Milan", chip_id, **spls)

    assert raised.value.reason is Reason.MALFORMED_CERTIFICATE
    assert "the VCEK from http://127.0.0.1" in str(raised.value)
    assert not (tmp_path / "vcek").exists()


def test_broken_cache_entry_is_refetched(
    server: KdsServer, tmp_path: Path, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    server.serve("/vcek/v1/Milan/cert_chain", (200, milan_chain_pem()))
    cache_file = tmp_path / "vcek" / "Milan" / "cert_chain.pem"
    cache_file.parent.mkdir(parents=True)
    cache_file.write_bytes(b"-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")

    with caplog.at_level(logging.WARNING, logger=kds.__name__):
        client(server, tmp_path, sleeps).cert_chain("Milan")

    assert server.requests == ["/vcek/v1/Milan/cert_chain"]
    assert cache_file.read_bytes() == milan_chain_pem()
    assert "ignoring a broken KDS cache entry" in caplog.text


def test_failing_cache_write_leaves_no_file_and_still_answers(
    server: KdsServer,
    tmp_path: Path,
    sleeps: list[float],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.serve("/vcek/v1/Milan/cert_chain", (200, milan_chain_pem()))

    def failing_replace(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with caplog.at_level(logging.WARNING, logger=kds.__name__):
        ask, _ = client(server, tmp_path, sleeps).cert_chain("Milan")

    assert certificates.common_name(ask.subject) == "SEV-Milan"
    assert list((tmp_path / "vcek" / "Milan").iterdir()) == []
    assert "No space left on device" in caplog.text


# CRLs. Authenticity is the verifier's business, so a CRL signed by a test key is enough here.


def make_crl(last_update: datetime, next_update: datetime) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "ARK-Milan")])
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(name)
        .last_update(last_update)
        .next_update(next_update)
        .sign(key, hashes.SHA256())
    )
    return crl.public_bytes(serialization.Encoding.DER)


CRL_PATH = "/vcek/v1/Milan/crl"
OLD_CRL = make_crl(NOW - timedelta(days=10), NOW - timedelta(days=1))
NEW_CRL = make_crl(NOW - timedelta(hours=1), NOW + timedelta(days=6))


def crl_der(crl: x509.CertificateRevocationList) -> bytes:
    return crl.public_bytes(serialization.Encoding.DER)


def test_crl_is_cached_until_its_next_update(
    server: KdsServer, tmp_path: Path, sleeps: list[float]
) -> None:
    server.serve(CRL_PATH, (200, NEW_CRL))

    first = client(server, tmp_path, sleeps).crl("Milan", now=NOW)
    second = client(server, tmp_path, sleeps).crl("Milan", now=NOW + timedelta(days=5))

    assert crl_der(first) == NEW_CRL
    assert crl_der(second) == NEW_CRL
    assert server.requests == [CRL_PATH]
    assert (tmp_path / "vcek" / "Milan" / "crl.der").read_bytes() == NEW_CRL


def test_expired_crl_is_refetched(server: KdsServer, tmp_path: Path, sleeps: list[float]) -> None:
    server.serve(CRL_PATH, (200, OLD_CRL), (200, NEW_CRL))
    client(server, tmp_path, sleeps).crl("Milan", now=NOW - timedelta(days=5))

    refreshed = client(server, tmp_path, sleeps).crl("Milan", now=NOW)

    assert crl_der(refreshed) == NEW_CRL
    assert server.requests == [CRL_PATH, CRL_PATH]
    assert (tmp_path / "vcek" / "Milan" / "crl.der").read_bytes() == NEW_CRL


@pytest.mark.parametrize(
    "failure",
    [((500, b"oops"), "500 Internal Server Error"), ((200, b"not a crl"), "not a DER or PEM CRL")],
)
def test_expired_crl_falls_back_to_the_cache_when_the_refetch_fails(
    server: KdsServer,
    tmp_path: Path,
    sleeps: list[float],
    caplog: pytest.LogCaptureFixture,
    failure: tuple[tuple[int, bytes], str],
) -> None:
    answer, logged = failure
    (tmp_path / "vcek" / "Milan").mkdir(parents=True)
    (tmp_path / "vcek" / "Milan" / "crl.der").write_bytes(OLD_CRL)
    server.serve(CRL_PATH, answer)

    with caplog.at_level(logging.WARNING, logger=kds.__name__):
        crl = client(server, tmp_path, sleeps, attempts=2).crl("Milan", now=NOW)

    assert crl_der(crl) == OLD_CRL
    assert server.requests
    assert "using the cached CRL" in caplog.text
    assert logged in caplog.text
    assert (tmp_path / "vcek" / "Milan" / "crl.der").read_bytes() == OLD_CRL


def test_crl_failure_without_a_cache_is_raised(
    server: KdsServer, tmp_path: Path, sleeps: list[float]
) -> None:
    server.serve("/vlek/v1/Milan/crl", (200, b"not a crl"))
    with pytest.raises(MalformedEvidence) as raised:
        client(server, tmp_path, sleeps).crl("Milan", now=NOW, key="vlek")
    assert raised.value.reason is Reason.MALFORMED_COLLATERAL
    assert server.requests == ["/vlek/v1/Milan/crl"]


# Arguments.


def test_masked_chip_id_cannot_be_looked_up(sleeps: list[float]) -> None:
    with pytest.raises(EvidenceUnavailable) as raised:
        kds.KdsClient(None).vcek("Genoa", bytes(64), bootloader=1, tee=0, snp=1, microcode=1)
    assert raised.value.reason is Reason.FETCH_FAILED
    assert "MASK_CHIP_ID" in str(raised.value)


@pytest.mark.parametrize(
    ("product", "chip_id", "spls", "message"),
    [
        ("Venice", bytes(range(64)), {}, "not 'Venice'"),
        ("milan", bytes(range(64)), {}, "not 'milan'"),
        ("Milan", bytes(range(8)), {}, "a Milan chip id is 64 bytes, got 8"),
        ("Turin", bytes(range(1, 17)), {"fmc": 0}, "a Turin chip id is 64 bytes"),
        ("Turin", bytes(range(1, 65)), {}, "pass fmc"),
        ("Milan", bytes(range(64)), {"fmc": 1}, "Milan has no FMC SPL"),
        ("Milan", bytes(range(64)), {"microcode": 256}, "ucodeSPL must be 0 to 255, got 256"),
        ("Genoa", bytes(range(64)), {"tee": -1}, "teeSPL must be 0 to 255, got -1"),
    ],
)
def test_bad_arguments(product: str, chip_id: bytes, spls: dict[str, int], message: str) -> None:
    arguments = {"bootloader": 1, "tee": 0, "snp": 1, "microcode": 1} | spls
    with pytest.raises(ContrastError, match=message):
        kds.KdsClient(None).vcek(product, chip_id, **arguments)


def test_bad_key_kind_and_base_url() -> None:
    with pytest.raises(ContrastError, match="'vcek' or 'vlek'"):
        kds.KdsClient(None).cert_chain("Milan", key="ask")
    with pytest.raises(ContrastError, match="must be http"):
        kds.KdsClient(None, base_url="file:///etc")
