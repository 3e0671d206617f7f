"""The CCEL event log: the golden replay against a real quote, and bad logs give typed errors."""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.attestation.tdx.eventlog import (
    EV_EFI_ACTION,
    EV_NO_ACTION,
    EV_SEPARATOR,
    TPM_ALG_SHA256,
    TPM_ALG_SHA384,
    CcelTable,
    Event,
    EventLog,
    EventLogError,
    SpecIdEvent,
    extend,
    read_event_log,
    replay,
)
from contrast.attestation.tdx.quote import Quote
from tests.conftest import ATTESTATION_DATA, require_shared

GOLDEN = ATTESTATION_DATA / "tdx" / "gtg-cos-113-ccel-v4"
ZERO = bytes(48)


@pytest.fixture(scope="module")
def golden() -> tuple[bytes, bytes, bytes]:
    require_shared()
    return (
        (GOLDEN / "ccel_table.bin").read_bytes(),
        (GOLDEN / "ccel_data.bin").read_bytes(),
        (GOLDEN / "quote.bin").read_bytes(),
    )


def test_replay_reproduces_the_quotes_rtmrs(golden: tuple[bytes, bytes, bytes]) -> None:
    table, data, quote = golden
    log = read_event_log(table, data)
    rtmrs = log.replay()
    assert rtmrs == Quote.from_bytes(quote).body.rtmrs
    expected = json.loads((GOLDEN / "expected.json").read_text())
    assert [r.hex() for r in rtmrs] == [expected["td"][f"rtmr{i}"] for i in range(4)]
    assert len(log.events) == expected["event_log"]["events_after_spec_id"]


def test_golden_table_and_log_read_out(golden: tuple[bytes, bytes, bytes]) -> None:
    table, data, _ = golden
    ccel = CcelTable.from_bytes(table)
    assert ccel.is_tdx
    assert ccel.log_area_minimum_length == len(data) == 0x40000
    assert ccel.oem_id == b"INTEL "
    assert ccel.to_bytes() == table
    log = EventLog.from_bytes(data)
    assert log.spec_id.algorithms == ((TPM_ALG_SHA384, 48),)
    assert log.spec_id.spec_version == (2, 0, 0)
    # The EFI actions TDVF logs are SHA-384 of their ASCII text (what RTMR1 predictions use).
    actions = [e for e in log.events if e.event_type == EV_EFI_ACTION]
    assert actions[0].data == b"Calling EFI Application from Boot Option"
    assert all(e.digest() == hashlib.sha384(e.data).digest() for e in actions)
    separators = [e for e in log.events if e.event_type == EV_SEPARATOR]
    assert all(e.digest() == hashlib.sha384(bytes(4)).digest() for e in separators)
    # The log round-trips once the 0xFF fill of the log area is dropped.
    encoded = log.to_bytes()
    assert data.startswith(encoded)
    assert not data[len(encoded) :].strip(b"\xff")
    assert EventLog.from_bytes(encoded) == log


def test_a_flipped_digest_changes_the_replay(golden: tuple[bytes, bytes, bytes]) -> None:
    table, data, quote = golden
    log = read_event_log(table, data)
    event = next(e for e in log.events if e.rtmr == 2)
    digest = event.digest()
    assert digest is not None
    tampered = Event(
        event.mr_index, event.event_type, ((TPM_ALG_SHA384, bytes([digest[0] ^ 1]) + digest[1:]),),
        event.data,
    )  # fmt: skip
    events = tuple(tampered if e is event else e for e in log.events)
    rtmrs = replay(events)
    assert rtmrs[2] != Quote.from_bytes(quote).body.rtmrs[2]
    assert rtmrs[:2] == Quote.from_bytes(quote).body.rtmrs[:2]


def test_every_truncation_is_a_prefix_or_a_typed_error(golden: tuple[bytes, bytes, bytes]) -> None:
    _, data, _ = golden
    full = EventLog.from_bytes(data)
    encoded = full.to_bytes()
    boundaries = set()
    offset = len(encoded) - sum(len(e.to_bytes()) for e in full.events)
    for event in full.events:
        boundaries.add(offset)
        offset += len(event.to_bytes())
    boundaries.add(offset)
    # Every cut inside the first events, and a spread of cuts further on.
    cuts = list(range(0, 1200)) + list(range(1200, len(encoded), 97))
    for cut in cuts:
        if cut in boundaries:
            prefix = EventLog.from_bytes(encoded[:cut]).events
            assert prefix == full.events[: len(prefix)]
            continue
        with pytest.raises(EventLogError):
            EventLog.from_bytes(encoded[:cut])


def test_bad_tables_are_refused(golden: tuple[bytes, bytes, bytes]) -> None:
    table, data, _ = golden
    with pytest.raises(EventLogError, match="signature"):
        CcelTable.from_bytes(b"XXXX" + table[4:])
    with pytest.raises(EventLogError, match="checksum"):
        CcelTable.from_bytes(table[:-1] + bytes([table[-1] ^ 1]))
    with pytest.raises(EventLogError, match="needs 56"):
        CcelTable.from_bytes(table[:40])
    sev = CcelTable.from_bytes(table)
    other = CcelTable(**{**sev.__dict__, "cc_type": 1}).to_bytes()
    with pytest.raises(EventLogError, match="not TDX"):
        read_event_log(other, data)


def test_events_outside_the_rtmrs_and_unknown_algorithms_are_refused() -> None:
    digest = hashlib.sha384(b"x").digest()
    with pytest.raises(EventLogError, match="MR index 0"):
        replay([Event(0, EV_EFI_ACTION, ((TPM_ALG_SHA384, digest),), b"x")])
    with pytest.raises(EventLogError, match="no SHA-384"):
        replay([Event(1, EV_EFI_ACTION, ((TPM_ALG_SHA256, digest[:32]),), b"x")])
    # EV_NO_ACTION records extend nothing, whatever their index.
    assert replay([Event(9, EV_NO_ACTION, (), b"")]) == (ZERO,) * 4
    spec = SpecIdEvent(0, (2, 0, 0), 2, ((TPM_ALG_SHA384, 48),))
    log = EventLog(0, spec, (Event(1, EV_EFI_ACTION, ((TPM_ALG_SHA256, digest[:32]),), b""),))
    with pytest.raises(EventLogError, match="not in the Spec ID"):
        EventLog.from_bytes(log.to_bytes())


def test_not_a_crypto_agile_log() -> None:
    legacy = struct.pack("<II20sI", 0, 8, bytes(20), 0)  # an EV_S_CRTM_VERSION first event
    with pytest.raises(EventLogError, match="crypto-agile"):
        EventLog.from_bytes(legacy)
    wrong_spec = struct.pack("<II20sI", 0, EV_NO_ACTION, bytes(20), 16) + b"Spec ID Event02\0"
    with pytest.raises(EventLogError):
        EventLog.from_bytes(wrong_spec)


_ALGORITHMS = st.lists(
    st.sampled_from([(0x0004, 20), (TPM_ALG_SHA256, 32), (TPM_ALG_SHA384, 48), (0x000D, 64)]),
    min_size=1,
    max_size=4,
    unique_by=lambda algorithm: algorithm[0],
).map(lambda algorithms: sorted({*algorithms, (TPM_ALG_SHA384, 48)}))


@st.composite
def event_logs(draw: st.DrawFn) -> EventLog:
    algorithms = tuple(draw(_ALGORITHMS))
    spec = SpecIdEvent(
        draw(st.integers(0, 2**32 - 1)), (2, 0, draw(st.integers(0, 255))), 2, algorithms,
        draw(st.binary(max_size=8)),
    )  # fmt: skip
    events = draw(
        st.lists(
            st.builds(
                Event,
                st.integers(1, 4),
                st.sampled_from([EV_SEPARATOR, EV_EFI_ACTION, 0x80000001, 0x8000000B]),
                st.binary(min_size=1, max_size=8).map(
                    lambda seed: tuple(
                        (alg, hashlib.shake_256(seed).digest(size)) for alg, size in algorithms
                    )
                ),
                st.binary(max_size=40),
            ),
            max_size=12,
        )
    )
    return EventLog(0, spec, tuple(events))


@given(event_logs(), st.sampled_from([b"", b"\xff" * 64, b"\x00" * 7]))
def test_logs_round_trip_and_replay_as_a_fold(log: EventLog, fill: bytes) -> None:
    parsed = EventLog.from_bytes(log.to_bytes() + fill)
    assert parsed == log
    registers = [ZERO] * 4
    for event in log.events:
        digest = event.digest()
        assert digest is not None
        registers[event.mr_index - 1] = hashlib.sha384(
            registers[event.mr_index - 1] + digest
        ).digest()
    assert parsed.replay() == tuple(registers)
    assert extend(ZERO, ZERO) == hashlib.sha384(bytes(96)).digest()


@given(event_logs(), st.data())
def test_corrupted_logs_parse_or_raise_typed_errors(log: EventLog, data: st.DataObject) -> None:
    encoded = bytearray(log.to_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(encoded) - 1))
        encoded[position] = data.draw(st.integers(0, 255))
    try:
        parsed = EventLog.from_bytes(bytes(encoded))
    except EventLogError:
        return
    with contextlib.suppress(EventLogError):
        parsed.replay()


@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash_the_parsers(data: bytes) -> None:
    for parse in (EventLog.from_bytes, CcelTable.from_bytes, SpecIdEvent.from_bytes):
        with contextlib.suppress(EventLogError):
            parse(data)
