"""The policy's JSON text: `dumps_indented` writes what `json.dumps(indent=2)` writes."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contrast.policy.jsontext import dumps_indented

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


def test_what_json_refuses_is_refused() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented(cycle)
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_indented({"set": {1}})
