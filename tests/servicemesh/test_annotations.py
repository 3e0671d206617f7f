"""The annotation syntax: the documented examples, defaults, and one error per malformed entry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.servicemesh.annotations import (
    EgressEntry,
    IngressEntry,
    ServiceMeshError,
    parse_egress,
    parse_ingress,
)


def test_documented_examples() -> None:
    assert parse_ingress("main#8001#false##metrics#8080#true") == (
        IngressEntry("main", 8001, disable_tls=False),
        IngressEntry("metrics", 8080, disable_tls=True),
    )
    assert parse_egress("backend#127.0.0.2:4001#backend.default:4001") == (
        EgressEntry("backend", "127.0.0.2", 4001, "backend.default", 4001),
    )


def test_absent_annotations_mean_all_mutual_tls_and_no_egress() -> None:
    assert parse_ingress("") == ()
    assert parse_egress("  ") == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("main#8001", "entry 1 .* has 2 fields, not 3"),
        ("main#8001#false##x#y#true", "entry 2 .* 'y' is not a port"),
        ("main#70000#false", "'70000' is not a port"),
        ("main#8001#yes", "'yes' is not true or false"),
        ("-bad#8001#true", "name '-bad' is not valid"),
        ("a#80#true##b#80#false", "port 80 is listed twice"),
    ],
)
def test_malformed_ingress(value: str, message: str) -> None:
    with pytest.raises(ServiceMeshError, match=message) as caught:
        parse_ingress(value)
    assert caught.value.hint is not None
    assert "name#port#disableTLS" in caught.value.hint


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("backend#127.0.0.2:4001", "has 2 fields"),
        ("backend#10.0.0.1:4001#backend:4001", "not in 127.0.0.0/8"),
        ("backend#localhost:4001#backend:4001", "'localhost' is not in 127.0.0.0/8"),
        ("backend#127.0.0.2#backend:4001", "'127.0.0.2' is not IP:port"),
        ("backend#127.0.0.2:1#backend", "'backend' is not host:port"),
        ("a#127.0.0.2:1#x:1##b#127.0.0.2:1#y:1", "127.0.0.2:1 is used twice"),
    ],
)
def test_malformed_egress(value: str, message: str) -> None:
    with pytest.raises(ServiceMeshError, match=message):
        parse_egress(value)


@given(st.text(alphabet="ab#:.1270 ", max_size=60))
def test_any_text_parses_or_gets_a_mesh_error(value: str) -> None:
    for parse in (parse_ingress, parse_egress):
        try:
            entries = parse(value)
        except ServiceMeshError:
            continue
        assert all(entry.name for entry in entries)
