"""`json.dumps`'s text (ensure_ascii=False), written by orjson wherever it is the same text.

`generate` writes JSON text in two forms for each workload: its policy's `policy_data` (30-40 KB,
2-space indent; with `indent`, CPython 3.11 takes json's pure-Python encoder) and the compact
fingerprint that tells a changed resource from an unchanged one. orjson writes both some ten to
fifteen times faster, and writes the same text for dicts, lists and tuples of strings, integers,
booleans and None. It writes floats its own way (`1e16` for json's `1e+16`, `null` for NaN), types
json refuses (dataclasses, UUIDs, enums), and subclasses from their storage rather than their
methods (an OrderedDict moved to the end), so its text is used only when a walk over the value
found nothing else. All other values, and what orjson refuses (keys that are not strings, integers
beyond 64 bits, cycles, nesting deeper than 254), go to `json.dumps` itself, which writes or
refuses them as it always did. tests/test_jsontext.py compares the two, every code point included.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# The exact types orjson writes as json does (subclasses go to json).
_SAME_SCALARS = frozenset({str, int, bool, type(None)})
_SAME_TYPES = _SAME_SCALARS | {dict, list, tuple}


def dumps_indented(value: Any, indent: int = 2) -> str:
    """`json.dumps(value, indent=indent, ensure_ascii=False)`."""
    if indent == 2:
        text = _orjson_text(value, orjson.OPT_INDENT_2)
        if text is not None:
            return text
    return json.dumps(value, indent=indent, ensure_ascii=False)


def dumps_compact(value: Any) -> str:
    """`json.dumps(value, separators=(",", ":"), ensure_ascii=False)`."""
    text = _orjson_text(value, None)
    if text is not None:
        return text
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _orjson_text(value: Any, option: int | None) -> str | None:
    """orjson's text of `value` if it is json's, else None."""
    if type(value) not in _SAME_TYPES:
        return None
    try:
        text = orjson.dumps(value, option=option)
    except orjson.JSONEncodeError:
        return None
    # Walked after orjson wrote it: a cycle has made orjson refuse, so this walk ends.
    return text.decode() if _only_same_types(value) else None


def _only_same_types(value: Any) -> bool:
    """Whether `value` holds only containers and scalars that orjson writes as json does."""
    kind = type(value)
    if kind is not dict and kind is not list and kind is not tuple:
        return kind in _SAME_SCALARS
    pending = [value]
    push = pending.append
    while pending:
        container = pending.pop()
        # The keys are left to orjson, which refuses any but strings.
        for item in container.values() if type(container) is dict else container:
            kind = type(item)
            # The scalars first, tested inline: they are most of the nodes.
            if kind is str or kind is int or kind is bool or item is None:
                continue
            if kind is dict or kind is list or kind is tuple:
                push(item)
            else:
                return False
    return True
