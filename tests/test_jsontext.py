"""`dumps_indented` and `dumps_compact` write what `json.dumps` writes (indent=2, or compact)."""

from __future__ import annotations

import collections
import dataclasses
import enum
import json
import math
import sys
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast import jsontext
from contrast.jsontext import dumps_compact, dumps_indented

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=5)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=40,
)


@given(JSON, st.integers(min_value=0, max_value=4))
def test_the_same_text_as_json_dumps(value: Any, indent: int) -> None:
    assert dumps_indented(value, indent) == json.dumps(value, indent=indent, ensure_ascii=False)
    assert dumps_compact(value) == _compact(value)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Text(str):
    __slots__ = ()


class Number(int):
    pass


class Mapping(dict[str, Any]):
    pass


class Sequence(list[Any]):
    pass


@pytest.mark.parametrize(
    "value",
    [
        {"a": [], "b": {}, "c": [[]], "d": [{}], "e": ""},
        {'quote"and\\': "é\u2028\x00\ud800", "nested": {"list": [1, 2.5, -0.0, 1e300]}},
        [math.nan, math.inf, -math.inf, True, False, None, 10**30],
        {Text("key"): Text("value"), "n": Number(5), "t": (1, (2,))},
        {"in a dict": [Text("a"), Number(1), True, None], "b": False, "f": 0.5, "z": None},
        [{"a": {}}, {"b": []}, Mapping({"c": Text("d")}), Sequence([Number(2)])],
        {1: "an int key", None: "a null key", False: "no", 2.5: "half"},  # json.dumps converts
    ],
)
def test_the_same_text_on_the_edges(value: Any) -> None:
    assert dumps_indented(value) == json.dumps(value, indent=2, ensure_ascii=False)
    assert dumps_compact(value) == _compact(value)


def test_what_json_refuses_is_refused() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_compact(cycle)
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_indented({"set": {1}})


def _every_code_point() -> list[str]:
    """Every Unicode scalar value (surrogates are not), in strings of 4096."""
    points = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    return ["".join(points[i : i + 4096]) for i in range(0, len(points), 4096)]


def test_every_code_point_is_written_as_json_writes_it() -> None:
    """orjson's escaping is json's (ensure_ascii=False): `"`, `\\` and C0 controls only."""
    strings = _every_code_point()
    value = {"values": strings, "keys": {text: len(text) for text in strings}}
    assert jsontext._only_same_types(value)  # so orjson writes it
    assert dumps_indented(value) == json.dumps(value, indent=2, ensure_ascii=False)
    assert dumps_compact(value) == _compact(value)
    assert dumps_compact(value) == _compact(value)


def test_plain_data_is_written_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    value = {"a": [1, -(2**63), 2**64 - 1, True, None, "x"], "b": {"c": ({}, [])}, "d": []}
    expected = json.dumps(value, indent=2, ensure_ascii=False)
    expected_compact = _compact(value)

    def refuse(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("json.dumps was called for plain data")

    monkeypatch.setattr(jsontext.json, "dumps", refuse)
    assert dumps_indented(value) == expected
    assert dumps_compact(value) == expected_compact


class Colour(enum.IntEnum):
    RED = 1


class Kind(enum.Enum):
    A = "a"


@dataclasses.dataclass
class Record:
    name: str


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        {"float": 1e16, "small": 1e-7, "integral": 1.0, "negative zero": -0.0},
        {"nan": math.nan, "inf": math.inf},
        {"int enum": Colour.RED, "in a list": [Colour.RED]},
        {Text("key"): "a string-subclass key", "plain": 1},
        {"beyond 64 bits": 2**64, "below": -(2**63) - 1},
        {"tuple": (1, ("a", None))},
        _nested(300),  # deeper than orjson writes
    ],
)
def test_what_orjson_writes_otherwise_is_written_as_json_writes_it(value: Any) -> None:
    assert dumps_indented(value) == json.dumps(value, indent=2, ensure_ascii=False)
    assert dumps_compact(value) == _compact(value)


def test_a_subclass_is_written_by_its_methods_as_json_writes_it() -> None:
    """An OrderedDict keeps its order apart from the dict's storage, which orjson reads."""
    moved = collections.OrderedDict([("a", 1), ("b", 2)])
    moved.move_to_end("a")
    value = {"moved": moved}
    assert dumps_compact(value) == '{"moved":{"b":2,"a":1}}' == _compact(value)
    assert dumps_compact(moved) == '{"b":2,"a":1}'


@pytest.mark.parametrize(
    "value", [{"enum": Kind.A}, {"uuid": uuid.UUID(int=1)}, {"dataclass": Record("a")}]
)
def test_what_json_refuses_orjson_does_not_write(value: Any) -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_indented(value)
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_compact(value)
