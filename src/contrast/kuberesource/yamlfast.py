"""A fast first reading of Kubernetes YAML, for `generate`: libyaml, resolved as ruamel resolves.

ruamel's round-trip loader is pure Python and takes about 25 ms for a generated workload file;
libyaml (PyYAML's C parser) reads the same file in 1 ms. `generate` needs the round-trip tree only
for the documents it changes; every document it leaves alone is written back verbatim. So it
reads everything here first and parses a document with ruamel only when it changes it
(`yamlio.ResourceFile.round_trip`).

The two readers must agree on every value, and YAML 1.1 (PyYAML's) and 1.2 (ruamel's) do not:
`yes`, `on`, `0777`, `1_000`, `12:30`, `<<`, timestamps. So scalars are resolved with ruamel's own
YAML 1.2 table, and a value whose construction could differ is not guessed at: the reading is
declined (None) and the caller parses the text with ruamel, whose reading wins. Declined too:
explicit tags, `%` directives, merge keys and duplicate keys (ruamel refuses those with a proper
message). tests/kuberesource/test_yamlfast.py shows each case against ruamel.
"""

from __future__ import annotations

import re
from typing import Any

import yaml  # type: ignore[import-untyped]
from ruamel.yaml import resolver as ruamel_resolver

# libyaml is optional in PyYAML (its wheels ship it): without it, every text is declined.
WITH_LIBYAML: bool = yaml.__with_libyaml__

# The forms whose value is the same in YAML 1.1, 1.2, PyYAML and ruamel.
_SIMPLE_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)\Z")
_SIMPLE_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")
# A tag (`!`, `!!int`, `!foo`) or a directive anywhere a token may start; a `!` inside a string
# after a blank declines too, which costs only speed.
_TAG_OR_DIRECTIVE = re.compile(r"(?:^|[\s\[\{,])!|^%", re.MULTILINE)
_MERGE = "tag:yaml.org,2002:merge"


class _Declined(Exception):
    """A value whose reading might differ from ruamel's."""


def load_all(text: str) -> tuple[Any, ...] | None:
    """The documents of `text` as plain dicts, lists and scalars, or None: read it with ruamel.

    None also for text that is not YAML: ruamel then gives the error, with its line and column.
    """
    if not WITH_LIBYAML or (("!" in text or "%" in text) and _TAG_OR_DIRECTIVE.search(text)):
        return None
    loader = _Loader(text)
    try:
        return tuple(document for document in _documents(loader))
    except Exception:  # whatever it is (a YAML error, a decline, depth): ruamel reads it
        return None
    finally:
        loader.dispose()


def _documents(loader: Any) -> Any:
    while loader.check_data():
        yield loader.get_data()


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's parser with ruamel's YAML 1.2 resolution and cautious constructors."""

    yaml_implicit_resolvers: dict[Any, Any] = {}  # noqa: RUF012 - PyYAML's class table

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        keys = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                raise _Declined
            key = self.construct_object(key_node, deep=True)
            if type(key) is not str:
                raise _Declined  # a plain document's keys are strings (yamlio.fingerprint)
            try:
                if key in keys:
                    raise _Declined  # ruamel refuses duplicate keys, naming their place
                keys.add(key)
            except TypeError:  # an unhashable key
                raise _Declined from None
        return super().construct_mapping(node, deep=deep)


def _int(loader: Any, node: Any) -> int:
    value = loader.construct_scalar(node)
    if not _SIMPLE_INT.match(value):
        raise _Declined  # octal, hexadecimal, binary, underscores: 1.1 and 1.2 differ
    return int(value)


def _float(loader: Any, node: Any) -> float:
    value = loader.construct_scalar(node)
    if not _SIMPLE_FLOAT.match(value):
        raise _Declined  # .inf, .nan, underscores, exponents without a point
    return float(value)


def _decline(loader: Any, node: Any) -> Any:
    raise _Declined


for _versions, _tag, _regexp, _first in ruamel_resolver.implicit_resolvers:
    if (1, 2) in _versions:
        _Loader.add_implicit_resolver(_tag, _regexp, list(_first))
_Loader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"\A\Z"), [""])
_Loader.add_constructor("tag:yaml.org,2002:int", _int)
_Loader.add_constructor("tag:yaml.org,2002:float", _float)
for _name in ("timestamp", "binary", "set", "omap", "pairs", "value", "yaml"):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_name}", _decline)
_Loader.add_constructor(None, _decline)  # any other tag
