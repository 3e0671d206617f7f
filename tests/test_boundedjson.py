"""Bounded JSON: size and depth refused before parsing, everything else parsed as `json` does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.boundedjson import JsonInputError, JsonLimits, load

LIMITS = JsonLimits(max_bytes=1 << 20, max_depth=8)

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=40,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(item) for item in value.values()), default=0)
    return 0


@given(values)
def test_documents_within_the_depth_are_parsed_as_json_does_and_deeper_ones_refused(
    value: Any,
) -> None:
    text = json.dumps(value)
    if depth(value) <= LIMITS.max_depth:
        assert load(text, LIMITS, what="the document") == json.loads(text)
    else:
        with pytest.raises(JsonInputError, match="the document nests deeper than 8 levels"):
            load(text, LIMITS, what="the document")


@given(st.binary(max_size=300) | st.text(alphabet='[]{}"\\:, 0a', max_size=300))
def test_any_input_is_parsed_or_refused_with_a_typed_error(data: bytes | str) -> None:
    try:
        load(data, LIMITS, what="input")
    except JsonInputError as error:
        message = str(error)
    else:
        return
    assert message.startswith("input ")


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_a_hundred_thousand_nested_levels_are_refused_before_parsing(opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    document = opener * 100_000 + closer * 100_000
    with pytest.raises(JsonInputError, match="nests deeper than 8 levels"):
        load(document, LIMITS, what="the manifest")


def test_unclosed_brackets_beyond_the_limit_are_refused() -> None:
    with pytest.raises(JsonInputError, match="nests deeper"):
        load("[" * 100_000, LIMITS, what="x")


def test_a_truncated_document_gets_the_parser_s_message() -> None:
    with pytest.raises(JsonInputError, match=r"x is not JSON: Expecting value: line 1 column 9"):
        load('{"a": [[', LIMITS, what="x")


def test_brackets_in_strings_do_not_nest() -> None:
    text = json.dumps(["[" * 1000 + '\\"{', {"k]]": "}}}"}])
    assert load(text, LIMITS, what="x") == json.loads(text)


def test_size_is_checked_first() -> None:
    small = JsonLimits(max_bytes=10, max_depth=8)
    with pytest.raises(JsonInputError, match="larger than the 10 bytes accepted"):
        load(b"[" + b"1," * 10 + b"1]", small, what="x")
    with pytest.raises(JsonInputError, match="larger than the 10 bytes accepted"):
        load('"ééééééé"', small, what="x")  # 9 characters, 16 bytes


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_not_json_constants_are_refused(constant: str) -> None:
    with pytest.raises(JsonInputError, match=f"{constant} is not a JSON value"):
        load(f"[{constant}]", LIMITS, what="x")
