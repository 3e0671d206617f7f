"""Parsed certificates are kept by their bytes; a changed byte is parsed anew (issue 14)."""

from __future__ import annotations

import pytest

from contrast.attestation import certificates
from contrast.attestation.errors import AttestationError
from tests.conftest import ATTESTATION_DATA, REPO

VCEK = (REPO / "examples" / "evidence" / "snp-milan-oak" / "vcek.der").read_bytes()
CRLS = sorted((ATTESTATION_DATA / "collateral" / "intel").glob("*/*crl*.der"))


def test_the_same_bytes_give_the_same_parsed_certificate() -> None:
    first = certificates.load_certificate(VCEK, what="a VCEK")
    again = certificates.load_certificate(bytes(VCEK), what="another name")
    assert again is first


@pytest.mark.parametrize("position", [10, len(VCEK) // 2, len(VCEK) - 5])
def test_a_changed_byte_misses_the_cache(position: int) -> None:
    original = certificates.load_certificate(VCEK, what="a VCEK")
    changed = bytearray(VCEK)
    changed[position] ^= 0x01
    try:
        other = certificates.load_certificate(bytes(changed), what="a changed VCEK")
    except AttestationError:
        return  # not a certificate any more: refused, not served from the cache
    assert other is not original
    assert other.tbs_certificate_bytes + other.signature != (
        original.tbs_certificate_bytes + original.signature
    )


def test_refusals_are_not_kept() -> None:
    with pytest.raises(AttestationError, match="first"):
        certificates.load_certificate(b"\x30\x03\x02\x01\x00", what="first")
    with pytest.raises(AttestationError, match="second"):
        certificates.load_certificate(b"\x30\x03\x02\x01\x00", what="second")


def test_the_cache_is_bounded() -> None:
    cached = certificates._load_certificates
    assert cached.cache_info().maxsize == certificates.CERTIFICATE_CACHE_SIZE


@pytest.mark.skipif(not CRLS, reason="the Intel collateral in ../shared is missing")
def test_certificates_and_crls_are_told_apart_by_their_headers() -> None:
    assert certificates._first_tag_inside_tbs(VCEK) == 0xA0
    for path in CRLS:
        data = path.read_bytes()
        assert certificates._first_tag_inside_tbs(data) != 0xA0
        chain, crl = certificates.split_endorsements([VCEK, data], what="endorsements")
        assert crl is not None
        assert [c.tbs_certificate_bytes for c in chain] == [
            certificates.load_certificate(VCEK).tbs_certificate_bytes
        ]


@pytest.mark.parametrize(
    "data", [b"", b"\x30", b"\x30\x82", b"\x31\x00", b"\x30\x84\xff\xff\xff\xff"]
)
def test_headers_that_are_cut_or_wrong_are_no_certificate(data: bytes) -> None:
    assert certificates._first_tag_inside_tbs(data) is None
    with pytest.raises(AttestationError):
        certificates.split_endorsements([data], what="endorsements")
