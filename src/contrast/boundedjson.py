"""JSON from outside, read with its size and nesting depth bounded before any parser sees it.

Python's `json` parser recurses once per nesting level, so 100 000 nested arrays raise
RecursionError from inside it (not the ValueError callers expect), and a document of any size is
read whole. `load` checks the size, then the depth with a scan that costs a few passes of
`bytes.replace` over the brackets, and only then parses. Not-JSON constants (`NaN`, `Infinity`),
which Python accepts and every other JSON reader refuses, are refused too.

The limits of each kind of document are next to its reader (`MANIFEST_LIMITS` in
`contrast.manifest.model`, ...), so each can say why it is what it is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from contrast.errors import ContrastError

# A JSON string, escapes included: what the depth scan must skip (brackets in strings do not nest).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Every byte that is not a bracket goes; opening and closing brackets of both kinds become one
# kind each, because for depth only "opens" and "closes" count.
_BRACKETS_ONLY = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class JsonInputError(ContrastError):
    """A JSON document from outside that is too large, nested too deeply, or not JSON."""


class NotJson(JsonInputError):
    """Within the limits, but not JSON: the parser's message says where."""


@dataclass(frozen=True)
class JsonLimits:
    """How large and how deeply nested one kind of document may be."""

    max_bytes: int
    max_depth: int


def load(data: bytes | str, limits: JsonLimits, *, what: str) -> Any:
    """Parse `data` as JSON within `limits`; `what` names the document in messages."""
    too_large = JsonInputError(f"{what} is larger than the {limits.max_bytes} bytes accepted")
    # A text has at least as many bytes as characters: a long one is refused before encoding.
    if len(data) > limits.max_bytes:
        raise too_large
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > limits.max_bytes:
        raise too_large
    if _nests_deeper_than(raw, limits.max_depth):
        raise JsonInputError(f"{what} nests deeper than {limits.max_depth} levels")
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as error:
        # ValueError includes JSONDecodeError, UnicodeDecodeError and the integer-digit limit.
        raise NotJson(f"{what} is not JSON: {error}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _nests_deeper_than(data: bytes, max_depth: int) -> bool:
    """Whether a parser reading `data` would go more than about `max_depth` levels deep.

    With strings removed and brackets reduced to `[` and `]`, each pass of removing every
    adjacent `[]` takes one level off every nest. Whatever is left after `max_depth` passes is
    either a nest deeper than that (it still holds a `[]`), or unmatched brackets: closers, which
    end a parse, then openers, which a parser follows until the text ends. Unmatched openers are
    allowed up to `max_depth` as well, so the parser goes at most 2 × `max_depth` deep and
    reports the real syntax error of a truncated document.
    """
    brackets = _STRING.sub(b"", data).translate(_BRACKETS_ONLY, _NOT_BRACKETS)
    for _ in range(max_depth):
        shorter = brackets.replace(b"[]", b"")
        if shorter == brackets:
            break
        brackets = shorter
    return b"[]" in brackets or brackets.count(b"[") > max_depth
