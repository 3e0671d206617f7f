"""ruamel's round-trip output for a plain Kubernetes document, written without ruamel's emitter.

Every document `generate` changes is written back by ruamel, which keeps its quoting, flow style
and comments. For a small Deployment that takes ~13 ms in ruamel's pure-Python representer,
serializer and emitter, most of `generate`'s time. Most documents use a small part of what that
code handles: block mappings and sequences, flow sequences and mappings, plain and quoted
one-line strings, integers and booleans, no comments, anchors or tags. For those the output is
a short function of the tree, written here with ruamel's own choices: the scalar style comes from
ruamel's emitter's analysis of the string (`Emitter.analyze_scalar`) and its rule for choosing a
style (`choose_scalar_style`, repeated below), the tag resolution from ruamel's YAML 1.2
resolver, the indentation from the document's `Indentation`.

Anything else (a comment, a null, a float, a multi-line or non-ASCII string, a key that is not a
string, a sequence directly in a sequence, the same container twice) is declined (None) and the
caller dumps with ruamel. tests/kuberesource/test_yamlrtdump.py compares the text with ruamel's
on generated and random documents.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.anchor import Anchor
from ruamel.yaml.comments import Comment, Format, merge_attrib
from ruamel.yaml.emitter import Emitter
from ruamel.yaml.scalarint import ScalarInt
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString
from ruamel.yaml.tag import Tag

from contrast.kuberesource import yamlblob, yamlrtload

_STR = "tag:yaml.org,2002:str"
# Printable ASCII on one line: written inside quotes as it is (no escapes, no folding).
_QUOTABLE = re.compile(r"[ -~]*\Z")
# ruamel's simple keys are at most 128 characters; longer ones are written as `? key`.
_SIMPLE_KEY_LIMIT = 128


class _Declined(Exception):
    """A part of the document that only ruamel's emitter writes right."""


def dump(
    document: Any, *, mapping: int, sequence: int, offset: int, explicit_start: bool
) -> str | None:
    """The text ruamel's round-trip `dump()` writes for `document`, or None: dump with ruamel.

    The indentation is ruamel's `YAML.indent(mapping=, sequence=, offset=)`; `explicit_start`
    its `explicit_start`. Only a non-empty mapping as the document is written here.
    """
    if sequence != offset + 2 or mapping < 1 or not isinstance(document, dict) or not document:
        return None
    writer = _Writer(mapping, offset)
    try:
        if _flow_style(document):
            return None
        writer.block_mapping(document, 0)
    except (_Declined, RecursionError):
        return None
    text = "".join(writer.parts)
    return f"---\n{text}" if explicit_start else text


class _Writer:
    def __init__(self, mapping: int, offset: int) -> None:
        self.mapping = mapping
        self.offset = offset
        self.parts: list[str] = []
        self.seen: set[int] = set()  # containers written: a second one would be an alias

    def _enter(self, node: Any) -> None:
        if id(node) in self.seen:
            raise _Declined
        self.seen.add(id(node))
        _check_plain_container(node)

    def block_mapping(
        self, node: dict[Any, Any], indent: int, first_prefix: str | None = None
    ) -> None:
        """`node` at `indent`; `first_prefix` replaces the first line's indentation (`- `)."""
        self._enter(node)
        prefix = " " * indent
        for position, (key, value) in enumerate(node.items()):
            line_start = first_prefix if position == 0 and first_prefix is not None else prefix
            self.parts.append(f"{line_start}{_key(key, flow=False)}:")
            self.value(value, indent)

    def value(self, value: Any, indent: int) -> None:
        """The value after `key:` in a block mapping whose keys are at `indent`."""
        if isinstance(value, dict | list):
            if not value or _flow_style(value):
                self.parts.append(f" {self.flow(value)}\n")
            elif isinstance(value, dict):
                self.parts.append("\n")
                self.block_mapping(value, indent + self.mapping)
            else:
                self.parts.append("\n")
                self.block_sequence(value, indent + self.offset)
        else:
            self.parts.append(f" {_scalar(value, flow=False, key=False)}\n")

    def block_sequence(self, node: list[Any], dash: int) -> None:
        self._enter(node)
        prefix = " " * dash
        for item in node:
            if isinstance(item, dict) and item and not _flow_style(item):
                self.block_mapping(item, dash + 2, first_prefix=f"{prefix}- ")
            elif isinstance(item, list) and item and not _flow_style(item):
                raise _Declined  # `- - a`: ruamel's compact nesting
            elif isinstance(item, dict | list):
                self.parts.append(f"{prefix}- {self.flow(item)}\n")
            else:
                self.parts.append(f"{prefix}- {_scalar(item, flow=False, key=False)}\n")

    def flow(self, node: dict[Any, Any] | list[Any]) -> str:
        self._enter(node)
        if isinstance(node, dict):
            items = (
                f"{_key(key, flow=True)}: {self.flow_item(value)}" for key, value in node.items()
            )
            return f"{{{', '.join(items)}}}"
        if any(isinstance(item, dict) for item in node):
            raise _Declined  # `[a: 1]`, `[ {}]`: ruamel's own spacing and braces there
        return f"[{', '.join(self.flow_item(item) for item in node)}]"

    def flow_item(self, value: Any) -> str:
        if isinstance(value, dict | list):
            if value and not _flow_style(value):
                raise _Declined  # a block collection inside a flow one
            return self.flow(value)
        return _scalar(value, flow=True, key=False)


def _check_plain_container(node: Any) -> None:
    """No comment, anchor, tag or merge on it: the things this writer does not write."""
    comment = getattr(node, Comment.attrib, None)
    if comment is not None and (comment.comment or comment.items or comment.end or comment.pre):
        raise _Declined
    anchor = getattr(node, Anchor.attrib, None)
    if anchor is not None and anchor.value is not None:
        raise _Declined
    tag = getattr(node, Tag.attrib, None)
    if tag is not None and tag.trval:
        raise _Declined
    if getattr(node, merge_attrib, None):
        raise _Declined


def _flow_style(node: Any) -> bool:
    """ruamel's choice for a non-empty collection: the style it was read in, else block."""
    form = getattr(node, Format.attrib, None)
    return bool(form is not None and form._flow_style)


def _key(key: Any, *, flow: bool) -> str:
    if not isinstance(key, str) or len(key) >= _SIMPLE_KEY_LIMIT:
        raise _Declined  # ruamel writes other keys as `? key`
    return _scalar(key, flow=flow, key=True)


def _scalar(value: Any, *, flow: bool, key: bool) -> str:
    kind = type(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is ScalarInt and value == 0 and value._width == 1 and value._underscore is None:
        if value.anchor.value is not None:
            raise _Declined
        return "0"  # how ruamel reads a plain 0 (it keeps the width of leading zeros)
    if kind is str:
        requested = None
    elif kind is DoubleQuotedScalarString:
        requested = '"'
    elif kind is SingleQuotedScalarString:
        requested = "'"
    else:
        raise _Declined  # null, float, ruamel's formatted numbers, block scalars, dates
    if kind is not str and value.anchor.value is not None:
        raise _Declined
    text = str(value)
    if requested is None and not key and yamlblob.is_blob(text):
        return text  # plain in every context, and a string
    choose = _remembered_style if len(text) <= yamlrtload.REMEMBERED_LENGTH else _style
    style = choose(text, requested, flow=flow, key=key)
    if style == "":
        return text
    if not _QUOTABLE.match(text):
        raise _Declined
    if style == "'":
        return "'" + text.replace("'", "''") + "'"
    if '"' in text or "\\" in text:
        raise _Declined  # escapes
    return f'"{text}"'


def _style(value: str, requested: str | None, *, flow: bool, key: bool) -> str:
    """ruamel's `Emitter.choose_scalar_style` for a string in block or flow context."""
    if requested == '"':
        return '"'
    analysis = _ANALYZER.analyze_scalar(value)
    if requested is None and yamlrtload.plain_tag(value) == _STR:
        simple_key_problem = key and (analysis.empty or analysis.multiline)
        allowed = analysis.allow_flow_plain if flow else analysis.allow_block_plain
        if not simple_key_problem and allowed:
            return ""
    if requested is None and analysis.allow_double_quoted and ("'" in value or "\n" in value):
        return '"'
    if analysis.allow_single_quoted and not (key and analysis.multiline):
        return "'"
    return '"'


_remembered_style = functools.lru_cache(maxsize=4096)(_style)


class _Analyzer(Emitter):
    """ruamel's emitter as its round-trip `YAML()` sets it up, used only to analyse scalars."""

    class serializer:  # noqa: N801 - the attribute `analyze_scalar` reads
        use_version = None


_ROUND_TRIP = YAML(typ="rt", pure=True)
_ANALYZER = _Analyzer(None, allow_unicode=_ROUND_TRIP.allow_unicode)
