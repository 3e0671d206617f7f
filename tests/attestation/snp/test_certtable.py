"""The extended report's certificate table."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.attestation.errors import MalformedEvidence, Reason
from contrast.attestation.snp import certtable
from contrast.attestation.snp.certtable import CertTable


def test_round_trip_and_lookup() -> None:
    table = CertTable.from_entries(
        [
            (certtable.VCEK_GUID, b"vcek-der"),
            (certtable.ASK_GUID, b"ask"),
            (certtable.ARK_GUID, b""),
        ]
    )
    data = table.to_bytes()
    assert data[:16] == certtable.VCEK_GUID.bytes  # RFC 4122 byte order, not bytes_le
    assert struct.unpack_from("<II", data, 16) == (4 * 24, 8)
    parsed = CertTable.from_bytes(data)
    assert parsed == table
    assert parsed.signing_certificate == b"vcek-der"
    assert parsed.get(certtable.ASK_GUID) == b"ask"
    assert parsed.get(certtable.CRL_GUID) is None


def test_vlek_is_the_signing_certificate_without_a_vcek() -> None:
    table = CertTable.from_entries([(certtable.VLEK_GUID, b"vlek")])
    assert CertTable.from_bytes(table.to_bytes()).signing_certificate == b"vlek"


def test_empty_blob_is_an_empty_table() -> None:
    assert CertTable.from_bytes(b"") == CertTable()
    assert CertTable.from_bytes(bytes(24)) == CertTable()


def _entry(guid: uuid.UUID, offset: int, length: int) -> bytes:
    return guid.bytes + struct.pack("<II", offset, length)


@pytest.mark.parametrize(
    "data",
    [
        _entry(certtable.VCEK_GUID, 48, 4),  # no terminator
        _entry(certtable.VCEK_GUID, 48, 100) + bytes(24) + b"abcd",  # runs past the end
        _entry(certtable.VCEK_GUID, 0, 4) + bytes(24) + b"abcd",  # points into the headers
        _entry(certtable.VCEK_GUID, 0xFFFFFFFF, 0xFFFFFFFF) + bytes(24),
        b"\x01" * 23,
    ],
)
def test_overruns_are_malformed(data: bytes) -> None:
    with pytest.raises(MalformedEvidence) as caught:
        CertTable.from_bytes(data)
    assert caught.value.reason is Reason.MALFORMED_CERT_TABLE


@given(st.lists(st.tuples(st.uuids(), st.binary(max_size=64)), max_size=6))
def test_any_table_round_trips(entries: list[tuple[uuid.UUID, bytes]]) -> None:
    entries = [(guid, data) for guid, data in entries if guid.int != 0]
    table = CertTable.from_entries(entries)
    assert CertTable.from_bytes(table.to_bytes()) == table


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_raise_malformed(data: bytes) -> None:
    try:
        table = CertTable.from_bytes(data)
    except MalformedEvidence as error:
        reason: Reason | None = error.reason
    else:
        reason = None
        assert all(len(entry.data) <= len(data) for entry in table.entries)
    assert reason in (None, Reason.MALFORMED_CERT_TABLE)
