"""Hypothesis strategies that damage valid inputs: text, bytes, and JSON/YAML trees.

Random bytes rarely get past the first check of a parser; a valid document with one thing wrong
reaches the code behind it. So every strategy here starts from a real input (a resource, a
manifest, a report, a certificate) and changes a little of it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import strategies as st

# Characters that mean something to YAML, JSON, TOML, Rego or PEM, plus some that should not
# appear at all.
SPECIALS = ":-[]{}&*!|>'\"#%@`,?=\\/\n\t \r\x00\x85\u2028\ufeffé𝄞"
TEXT = st.text(alphabet=st.sampled_from(SPECIALS) | st.characters(), max_size=12)
# Command-line arguments are C strings: no NUL byte can reach argv.
ARGUMENT = TEXT.map(lambda text: text.replace("\x00", ""))

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=16)
    | st.sampled_from(["", "0", "-1", "1e400", "true", "null", "*", "~", "Ki", "99999999999Ei"])
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def mutated_text(draw: st.DrawFn, text: str, max_edits: int = 3) -> str:
    """`text` with a few deletions, insertions, duplications or a truncation."""
    for _ in range(draw(st.integers(1, max_edits))):
        size = len(text)
        start = draw(st.integers(0, size))
        end = draw(st.integers(start, min(size, start + 40)))
        edit = draw(st.sampled_from(["delete", "insert", "replace", "duplicate", "truncate"]))
        if edit == "delete":
            text = text[:start] + text[end:]
        elif edit == "insert":
            text = text[:start] + draw(TEXT) + text[start:]
        elif edit == "replace":
            text = text[:start] + draw(TEXT) + text[end:]
        elif edit == "duplicate":
            text = text[:end] + text[start:end] + text[end:]
        else:
            text = text[:start]
    return text


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes, max_edits: int = 3) -> bytes:
    """`data` with flipped bits, changed bytes, a truncation or an extension."""
    buffer = bytearray(data)
    for _ in range(draw(st.integers(1, max_edits))):
        edit = draw(st.sampled_from(["flip", "set", "truncate", "extend", "splice"]))
        position = draw(st.integers(0, max(len(buffer) - 1, 0)))
        if edit == "flip" and buffer:
            buffer[position] ^= 1 << draw(st.integers(0, 7))
        elif edit == "set" and buffer:
            buffer[position] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif edit == "truncate":
            del buffer[position:]
        elif edit == "extend":
            buffer += draw(st.binary(min_size=1, max_size=64))
        else:
            length = draw(st.integers(0, 16))
            buffer[position : position + length] = draw(st.binary(max_size=16))
    return bytes(buffer)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


@st.composite
def mutated_tree(draw: st.DrawFn, tree: Any, max_edits: int = 2) -> Any:
    """A deep copy of a JSON-like tree with a few nodes replaced, removed or added."""
    tree = copy.deepcopy(tree)
    for _ in range(draw(st.integers(1, max_edits))):
        paths = [path for path in _paths(tree) if path]
        if not paths:
            return draw(JSON_VALUES)
        path = draw(st.sampled_from(paths))
        parent = tree
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        edit = draw(st.sampled_from(["replace", "remove", "add", "wrap"]))
        if edit == "replace":
            parent[key] = draw(JSON_VALUES)
        elif edit == "remove":
            del parent[key]
        elif edit == "wrap":
            parent[key] = [parent[key]] if draw(st.booleans()) else {"x": parent[key]}
        elif isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=8))] = draw(JSON_VALUES)
        elif isinstance(parent[key], list):
            parent[key].append(draw(JSON_VALUES))
        else:
            parent[key] = draw(JSON_VALUES)
    return tree


def one_of_mutations(text: str, tree: Any, dump: Callable[[Any], str]) -> st.SearchStrategy[str]:
    """The document damaged as text, or as a tree and written out again."""
    return mutated_text(text) | mutated_tree(tree).map(dump)
