"""How deeply a TOML document nests, bounded before any parser sees it.

`tomllib` recurses once or more per nested array or inline table, so a few thousand `[` end in
`RecursionError`; a key of many dotted parts (`a.a.a…`, or a `[a.a.a…]` header) does not
recurse but costs `tomllib` memory quadratic in the parts (100 000 parts, 200 KB of text, were
killed for want of memory), and the nested tables it makes break every recursive walk after it
(`json.dumps`, comparison, tomlkit). containerd's config and Kata's configuration nest a few
levels (`plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options` is six), so
anything past `MAX_DEPTH` is refused up front, with a message, instead.

The bound is lexical: one pass over the text that skips strings and comments and counts, at
each point, the open arrays and inline tables plus the parts of the keys and the table header
that lead there (`[[…]]` counts one more). That is never less than the nesting `tomllib` would
build, except that an array of tables inside another (`[[a]]` then `[[a.b]]`) is one level in
the count but two in the document, so documents within the bound nest at most `2 * MAX_DEPTH`
containers, which every reader here handles. The count stops at the first level past the
bound, so a hostile text costs one pass, whatever its size.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from contrast.nodeinstaller.errors import NodeInstallerError

MAX_DEPTH = 64

_TOKEN = re.compile(r'"""|\'\'\'|["\'#\[\]{}.=,\n]')
_BASIC = re.compile(r'(?:[^"\\\n]|\\.)*"')
_MULTILINE_BASIC = re.compile(r'(?:[^"\\]|\\.|"(?!""))*"""', re.DOTALL)
_HEADER, _ARRAY_OF_TABLES, _ARRAY, _INLINE = range(4)


class TomlTooDeep(NodeInstallerError, ValueError):
    """The text nests more deeply than `MAX_DEPTH`; the message says so (no file name).

    Also a `ValueError`, as `tomllib`'s own refusals are, for callers that catch those.
    """


def check_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """Raise `TomlTooDeep` if `text` nests tables, arrays and dotted keys deeper than `limit`."""
    if _depth(text, limit) > limit:
        raise TomlTooDeep(
            f"nested more than {limit} levels deep (tables, arrays, inline tables and dotted"
            " keys together)"
        )


def loads(text: str, limit: int = MAX_DEPTH) -> dict[str, Any]:
    """`tomllib.loads` of a text within the bound; `TomlTooDeep` otherwise.

    `RecursionError` from the parser (which the bound should make impossible) is the same
    refusal, not an internal error.
    """
    check_depth(text, limit)
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise TomlTooDeep(f"nested too deeply to be read (limit {limit} levels)") from None


def _depth(text: str, limit: int) -> int:
    """The deepest level the lexical count reaches, or the first past `limit`."""
    stack: list[tuple[int, int]] = []  # (kind, level before it opened)
    table = 0  # the current table header's level
    level = 1  # where the key being read ends up: its first part
    deepest = level
    in_key = True  # reading a key (statement start, after `{` or `,` in an inline table)
    position = 0
    while (match := _TOKEN.search(text, position)) is not None:
        symbol = match.group()
        position = match.end()
        if symbol in ('"', "'", '"""', "'''", "#"):
            position = _skip(text, symbol, position)
            continue
        if symbol == "\n":
            if not stack:  # a statement ends; inside arrays, lines continue the value
                level, in_key = table + 1, True
        elif symbol == ".":
            if in_key:  # a dotted key's part (a `.` in a value is a float's or a time's)
                level += 1
        elif symbol == "=":
            in_key = False
        elif symbol == "[":
            if not stack and in_key:  # a table header: `[a.b]` or `[[a.b]]`
                kind = _HEADER
                if text.startswith("[", position):
                    kind, position = _ARRAY_OF_TABLES, position + 1
                stack.append((kind, 0))
                level = 2 if kind == _ARRAY_OF_TABLES else 1
            else:
                stack.append((_ARRAY, level))
                level += 1
                in_key = False
        elif symbol == "]":
            if stack and stack[-1][0] in (_HEADER, _ARRAY_OF_TABLES):
                kind, _ = stack.pop()
                if kind == _ARRAY_OF_TABLES and text.startswith("]", position):
                    position += 1
                table, in_key = level, False
            elif stack and stack[-1][0] == _ARRAY:
                level = stack.pop()[1]
        elif symbol == "{":
            stack.append((_INLINE, level))
            level += 1  # its first key's first part, one level below the key it is the value of
            in_key = True
        elif symbol == "}":
            if stack and stack[-1][0] == _INLINE:
                level = stack.pop()[1]
                in_key = False
        elif symbol == "," and stack:
            kind, before = stack[-1]
            if kind == _INLINE:
                level, in_key = before + 1, True
            elif kind == _ARRAY:
                level = before + 1
        deepest = max(deepest, level)
        if deepest > limit:
            break
    return deepest


def _skip(text: str, opening: str, position: int) -> int:
    """Where the string or comment that `opening` starts at `position` ends."""
    if opening == "#":
        end = text.find("\n", position)
        return len(text) if end < 0 else end
    if opening == "'":
        quote, newline = text.find("'", position), text.find("\n", position)
        if quote >= 0 and (newline < 0 or quote < newline):
            return quote + 1
        return len(text) if newline < 0 else newline  # unterminated: the parser refuses it
    if opening == '"':
        match = _BASIC.match(text, position)
        if match is None:  # unterminated: the parser refuses it; stop at the line's end
            end = text.find("\n", position)
            return len(text) if end < 0 else end
        return match.end()
    if opening == "'''":
        end = text.find("'''", position)
        end = len(text) if end < 0 else end + 3
    else:
        match = _MULTILINE_BASIC.match(text, position)
        end = len(text) if match is None else match.end()
    # Up to two more quotes are part of the string (`'''a''''` holds `a'`).
    for _ in range(2):
        if text.startswith(opening[0], end):
            end += 1
    return end
