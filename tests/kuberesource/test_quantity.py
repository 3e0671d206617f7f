"""Kubernetes quantities parse exactly."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.kuberesource.quantity import QuantityError, mebibytes, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("128Mi", 128 * 2**20),
        ("1Gi", 2**30),
        ("0.5Gi", 2**29),
        ("500M", 500 * 10**6),
        ("1e9", 10**9),
        ("1E3", 1000),
        ("512", 512),
        (512, 512),
        ("100m", Decimal("0.1")),
        ("1.5k", 1500),
        (".5Ki", 512),
    ],
)
def test_parse(text: object, expected: object) -> None:
    assert parse_quantity(text) == Decimal(str(expected))


@pytest.mark.parametrize("text", ["", "Mi", "1Gb", "1 Gi", "1.2.3", "lots", "1e", "0x10"])
def test_malformed(text: str) -> None:
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        parse_quantity(text, "where")


@given(st.integers(min_value=0, max_value=2**50))
def test_mebibytes_round_up(value: int) -> None:
    mib = mebibytes(Decimal(value))
    assert (mib - 1) * 2**20 < value <= mib * 2**20 or value == mib == 0
    assert parse_quantity(f"{value}Ki") == value * 1024
