"""ruamel's round-trip tree of a plain Kubernetes document, built from libyaml's events.

`generate` parses every document it changes into ruamel's round-trip tree, whose nodes keep the
quoting and flow style of what they hold so that the rewrite looks like the original. ruamel's
pure-Python scanner, parser, composer and constructor take ~8 ms for a small Deployment;
libyaml (PyYAML's C parser) gives the events in a tenth of that. So for the documents Kubernetes
users mostly write, the tree is built here from libyaml's events, node for node as ruamel's
`RoundTripConstructor` builds it with `preserve_quotes`: `CommentedMap` and `CommentedSeq` with
their block or flow style, `DoubleQuotedScalarString` and `SingleQuotedScalarString` for quoted
strings, `str` for plain ones, `int` and `bool` as ruamel's YAML 1.2 resolver reads them. Only
the line and column ruamel notes on each node are left out: nothing here reads them, and
neither ruamel's emitter nor `yamlrtdump` writes them.

libyaml does not report comments or blank lines (ruamel keeps both), anchors need ruamel's
bookkeeping, block scalars and numbers in other forms (`0x1F`, `1_000`, floats, timestamps) keep
details of their text, and nulls, merge keys and duplicate keys take ruamel's own rules. A
document with any of those, with tags or directives, or one libyaml cannot read, is declined
(None): the caller reads it with ruamel, which also gives the errors.
tests/kuberesource/test_yamlrtload.py compares the trees with ruamel's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

import yaml  # type: ignore[import-untyped]
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.scalarint import ScalarInt
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

from contrast.kuberesource import yamlfast

# Between two tokens, what ruamel's scanner reads more from than libyaml: a comment, an anchor
# or alias, a tag, a complex key, a block scalar indicator, a directive, a blank line, and the
# line breaks and tabs the two may not read alike (`\r\n\r\n` is a blank line too).
_NOT_BETWEEN_TOKENS = re.compile("[#&*!?|>%\t\r\x85\u2028\u2029]|\n *\n")
_DECIMAL = re.compile(r"-?[1-9][0-9]*\Z")
_TAG = "tag:yaml.org,2002:"
_QUOTED = {"'": SingleQuotedScalarString, '"': DoubleQuotedScalarString}


class _Declined(Exception):
    """Something in the document that only ruamel's own loader reads in full."""


def load(text: str) -> Any | None:
    """The one document in `text` as ruamel's round-trip loader builds it, or None.

    None: read it with ruamel (`YAML(typ="rt").load_all(text)`), which may also raise.
    """
    # A byte order mark: libyaml's marks do not count it, so `_checked_events` would look at
    # the text one character off.
    if not yamlfast.WITH_LIBYAML or "\ufeff" in text:
        return None
    builder = _Builder()
    try:
        for event in _checked_events(text):
            builder.add(event)
    except Exception:  # libyaml's error or a decline: ruamel reads it and gives its own answer
        return None
    return builder.document if builder.documents == 1 else None


def _checked_events(text: str) -> Iterator[Any]:
    """libyaml's events, declined where the text between two tokens holds what it drops."""
    previous_end = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        start = event.start_mark.index
        if start > previous_end and _NOT_BETWEEN_TOKENS.search(text, previous_end, start):
            raise _Declined
        previous_end = max(previous_end, event.end_mark.index)
        yield event
    if _NOT_BETWEEN_TOKENS.search(text, previous_end):
        raise _Declined


class _Builder:
    """The tree from the events, as ruamel's composer and round-trip constructor make it."""

    def __init__(self) -> None:
        self.document: Any = None
        self.documents = 0
        # Open collections; for a mapping also the key read last (None: a key comes next).
        self.stack: list[Any] = []
        self.keys: list[Any] = []
        self.flow: list[bool] = []

    def add(self, event: Any) -> None:
        kind = type(event)
        if getattr(event, "anchor", None) is not None or getattr(event, "tag", None) is not None:
            raise _Declined
        if kind is yaml.ScalarEvent:
            self._value(_scalar(event))
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            collection = CommentedMap() if kind is yaml.MappingStartEvent else CommentedSeq()
            self._value(collection)
            self.stack.append(collection)
            self.keys.append(_NO_KEY)
            self.flow.append(bool(event.flow_style))
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            collection = self.stack.pop()
            self.keys.pop()
            flow = self.flow.pop()
            if collection:  # ruamel's `set_collection_style`
                if flow:
                    collection.fa.set_flow_style()
                else:
                    collection.fa.set_block_style()
        elif kind is yaml.DocumentStartEvent:
            if event.version is not None or event.tags:
                raise _Declined
        elif kind is yaml.DocumentEndEvent:
            if event.explicit:
                raise _Declined  # `...`: ruamel records it on the document
            self.documents += 1
        elif kind is not yaml.StreamStartEvent and kind is not yaml.StreamEndEvent:
            raise _Declined  # an alias

    def _value(self, value: Any) -> None:
        if not self.stack:
            self.document = value
            return
        parent = self.stack[-1]
        if isinstance(parent, CommentedSeq):
            parent.append(value)
            return
        key = self.keys[-1]
        if key is _NO_KEY:
            if isinstance(value, CommentedMap | CommentedSeq) or value is None:
                raise _Declined  # a complex or null key
            if value in parent:
                raise _Declined  # ruamel refuses duplicate keys, naming their place
            self.keys[-1] = value
            return
        parent[key] = value
        self.keys[-1] = _NO_KEY


_NO_KEY = object()


def _scalar(event: Any) -> Any:
    """A scalar as ruamel's round-trip constructor makes it (with `preserve_quotes`)."""
    value: str = event.value
    style = event.style
    if style:
        if style not in _QUOTED or event.start_mark.line != event.end_mark.line:
            raise _Declined  # block scalars and multi-line quoted ones keep more of their form
        return _QUOTED[style](value)
    if event.start_mark.line != event.end_mark.line:
        raise _Declined  # a plain scalar folded from several lines
    tag = plain_tag(value)
    if tag == f"{_TAG}str":
        return value
    if tag == f"{_TAG}int":
        if _DECIMAL.match(value):
            return int(value)
        if value == "0":
            return ScalarInt(0, width=1)  # ruamel keeps the width of a leading zero
        raise _Declined  # signs, octal, hexadecimal, underscores: ruamel keeps their form
    if tag == f"{_TAG}bool" and value in _BOOLEANS:
        return _BOOLEANS[value]
    raise _Declined  # null, float, timestamp, merge, ...


def plain_tag(value: str) -> str:
    """The tag ruamel's YAML 1.2 resolver gives `value` written as a plain scalar.

    Short values (names, images, ports: most repeat from workload to workload) are remembered;
    long ones (an initdata annotation) would fill memory for nothing.
    """
    if len(value) > REMEMBERED_LENGTH:
        return _plain_tag(value)
    return _remembered_plain_tag(value)


def _plain_tag(value: str) -> str:
    return str(_RESOLVER.resolve(ScalarNode, value, (True, False)))


# Strings at most this long are remembered by `plain_tag` and yamlrtdump's style choice.
REMEMBERED_LENGTH = 256
_remembered_plain_tag = functools.lru_cache(maxsize=8192)(_plain_tag)


_BOOLEANS = {"true": True, "false": False}
_RESOLVER = YAML(typ="rt", pure=True).resolver
