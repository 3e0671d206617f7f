"""`json.dumps(value, indent=N, ensure_ascii=False)`'s text, without its generator chain.

A policy's `policy_data` (30-40 KB of JSON, one per workload) is written with a 2-space indent.
With `indent`, CPython 3.11 takes the pure-Python encoder, which passes every piece of text up
through one generator per level of nesting; that was about a tenth of deriving a policy. This
encoder appends to one list instead and encodes strings with the same C function, so it writes
the same text about 1.6 times faster. It takes JSON data only (dicts with string keys, lists,
tuples, strings, ints, floats, booleans, None); anything else goes to `json.dumps` itself, which
then encodes or refuses it as it always did. tests/policy/test_jsontext.py compares the two.
"""

from __future__ import annotations

import json
from json.encoder import INFINITY, encode_basestring
from typing import Any

_float_repr = float.__repr__
_int_repr = int.__repr__


class _NotJsonData(Exception):
    """A value `json.dumps` handles by its own rules (a non-string key, another type)."""


def dumps_indented(value: Any, indent: int = 2) -> str:
    """`json.dumps(value, indent=indent, ensure_ascii=False)`."""
    out: list[str] = []
    try:
        _encode(value, "\n", " " * indent, out)
    except (_NotJsonData, RecursionError):  # json.dumps's own answer (a cycle: ValueError)
        return json.dumps(value, indent=indent, ensure_ascii=False)
    return "".join(out)


def _float(value: float) -> str:
    if value != value:  # noqa: PLR0124 - NaN, as json writes it
        return "NaN"
    if value == INFINITY:
        return "Infinity"
    if value == -INFINITY:
        return "-Infinity"
    return _float_repr(value)


def _encode(value: Any, newline: str, step: str, out: list[str]) -> None:
    """Append `value`'s text; `newline` is a newline and the indentation of `value`'s line."""
    kind = type(value)
    # Containers by their exact type first (most of a policy), then scalars as json orders them.
    if kind is dict:
        _encode_dict(value, newline, step, out)
    elif kind is list or kind is tuple:
        _encode_list(value, newline, step, out)
    elif kind is str or isinstance(value, str):
        out.append(encode_basestring(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(_int_repr(value))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, list | tuple):
        _encode_list(value, newline, step, out)
    elif isinstance(value, dict):
        _encode_dict(value, newline, step, out)
    else:
        raise _NotJsonData


def _encode_list(value: Any, newline: str, step: str, out: list[str]) -> None:
    if not value:
        out.append("[]")
        return
    inner = newline + step
    separator = "[" + inner
    for item in value:
        out.append(separator)
        separator = "," + inner
        if type(item) is str:
            out.append(encode_basestring(item))
        else:
            _encode(item, inner, step, out)
    out.append(newline + "]")


def _encode_dict(value: Any, newline: str, step: str, out: list[str]) -> None:
    if not value:
        out.append("{}")
        return
    inner = newline + step
    separator = "{" + inner
    for key, item in value.items():
        if not isinstance(key, str):
            raise _NotJsonData
        out.append(separator)
        separator = "," + inner
        kind = type(item)
        # The scalars a policy is made of, written here rather than in a call of their own.
        if kind is str:
            out.append(encode_basestring(key) + ": " + encode_basestring(item))
        elif item is True:
            out.append(encode_basestring(key) + ": true")
        elif item is False:
            out.append(encode_basestring(key) + ": false")
        elif item is None:
            out.append(encode_basestring(key) + ": null")
        elif kind is int:
            out.append(encode_basestring(key) + ": " + _int_repr(item))
        else:
            out.append(encode_basestring(key) + ": ")
            _encode(item, inner, step, out)
    out.append(newline + "}")
