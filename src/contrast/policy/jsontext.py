"""`json.dumps(value, indent=2, ensure_ascii=False)`'s text, written by orjson where it is the same.

A policy's `policy_data` (30-40 KB of JSON, one per workload) is written with a 2-space indent.
With `indent`, CPython 3.11 takes the pure-Python encoder, about a tenth of deriving a policy.
orjson writes the same text some fifteen times faster, for the data it writes as json does:
dicts, lists and tuples of strings, integers, booleans and None. It writes floats its own way
(`1e16` for json's `1e+16`, `null` for NaN) and other types json refuses (dataclasses, UUIDs,
enums), so a value is handed to orjson's text only when a walk over it found nothing else; all
other values, and what orjson refuses (keys that are not strings, integers beyond 64 bits, cycles,
nesting deeper than 254), go to `json.dumps` itself, which writes or refuses them as it always
did. tests/policy/test_jsontext.py compares the two, every code point included.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# The exact types orjson writes as json does; subclasses go to json (its rules for them differ).
_SAME_SCALARS = frozenset({str, int, bool, type(None)})


def dumps_indented(value: Any, indent: int = 2) -> str:
    """`json.dumps(value, indent=indent, ensure_ascii=False)`."""
    if indent == 2:
        try:
            text = orjson.dumps(value, option=orjson.OPT_INDENT_2)
        except orjson.JSONEncodeError:
            pass
        else:
            # Checked after orjson: a cycle has made it refuse, so this walk ends.
            if _only_same_types(value):
                return text.decode()
    return json.dumps(value, indent=indent, ensure_ascii=False)


def _only_same_types(value: Any) -> bool:
    """Whether `value` holds only containers and scalars that orjson writes as json does."""
    pending = [value]
    take, add = pending.pop, pending.extend
    while pending:
        item = take()
        kind = type(item)
        if kind is dict:
            add(item.values())  # the keys: orjson refuses any but strings
        elif kind is list or kind is tuple:
            add(item)
        elif kind not in _SAME_SCALARS:
            return False
    return True
