"""Bounds on YAML from outside: alias expansion, self-reference and nesting depth.

A YAML alias (`*a`) stands for the node anchored as `&a`, and the parser shares that node
instead of copying it. So nine lines that each list the previous anchor nine times (the "billion
laughs", 342 bytes) load as a few dozen objects, yet expand to hundreds of millions of nodes as
soon as anything walks them: copying to plain data, hashing, serialising, searching for
annotations. An alias may even name the node it sits in, and a walk never ends. Kubernetes' own
YAML library refuses "excessive aliasing" for the same reason.

So every YAML stream that comes from outside (`generate`'s inputs and stdin, the resources
`contrast set` reads, policies given as YAML) is measured right after loading, in time linear
in what was loaded, and refused when its aliases add more than `ALIAS_EXPANSION_BUDGET` nodes
to what is written, or when a node contains itself. Deep nesting fails inside the parser, which
recurses per level; that becomes a refusal too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ruamel.yaml import YAML

from contrast.kuberesource.workloads import ResourceError

# Nodes that aliases may add to a stream beyond the ones written out. Kubernetes YAML rarely
# uses anchors at all; a shared env list or resources block reused in a few containers adds
# hundreds. 100 000 is far beyond that and still walked in a fraction of a second.
ALIAS_EXPANSION_BUDGET = 100_000
# The most bytes one YAML file (or stdin) may hold, read before anything parses it
# (`contrast.boundedfile`): a generated workload is about 20 KiB, its policy included, so this is
# ten thousand of them in one file; Kubernetes stores no object above 1.5 MiB.
MAX_FILE_BYTES = 256 << 20


class YamlBoundsError(ResourceError):
    """A YAML stream that would expand beyond the budget, never end, or nests too deeply."""


def _is_container(node: Any) -> bool:
    return isinstance(node, Mapping | list)


def _entries(node: Any) -> Iterable[Any]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield key
            yield value
    else:
        yield from node


def expansion(document: Any) -> tuple[int, int]:
    """(nodes with every alias expanded, nodes as loaded) of one document.

    A container counts one plus its scalar entries (keys included), plus what its container
    entries count; shared containers count once per reference in the first figure and once
    in the second. Computed bottom-up over the shared graph, so a bomb costs what it loads.
    """
    if not _is_container(document):
        return 1, 1
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    literal = 0
    stack: list[tuple[Any, bool]] = [(document, False)]
    while stack:
        node, entered = stack.pop()
        key = id(node)
        if entered:
            on_path.discard(key)
            sizes[key] = 1 + sum(
                sizes[id(entry)] if _is_container(entry) else 1 for entry in _entries(node)
            )
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise _SelfReference
        on_path.add(key)
        literal += 1 + sum(1 for entry in _entries(node) if not _is_container(entry))
        stack.append((node, True))
        stack.extend((entry, False) for entry in _entries(node) if _is_container(entry))
    return sizes[id(document)], literal


class _SelfReference(Exception):
    """A container reached again while walking its own entries."""


def check_aliases(documents: Iterable[Any], text: str, name: str) -> None:
    """Refuse a stream whose aliases add more than the budget, or one that contains itself.

    `text` is the stream as read: without a `*` it holds no alias, and nothing is walked.
    """
    if "*" not in text:
        return
    added = 0
    for number, document in enumerate(documents, start=1):
        try:
            expanded, literal = expansion(document)
        except _SelfReference:
            raise YamlBoundsError(
                f"{name}: document {number}: an alias refers to a node that contains it, so"
                " the document refers to itself and never ends",
                hint="write the repeated part out instead of aliasing its parent",
            ) from None
        added += expanded - literal
        if added > ALIAS_EXPANSION_BUDGET:
            raise YamlBoundsError(
                f"{name}: document {number}: its YAML aliases expand to {expanded} nodes from"
                f" {literal} written; at most {ALIAS_EXPANSION_BUDGET} nodes through aliases"
                " are accepted per file",
                hint="write the repeated parts out instead of nesting aliases",
            )


def too_deep(name: str) -> YamlBoundsError:
    """The parser recursed past Python's limit: the text nests more deeply than it can read."""
    return YamlBoundsError(
        f"{name}: the YAML is nested more deeply than Contrast can read",
        hint="Kubernetes resources nest a few dozen levels; check what produced this file",
    )


def load_all_safe(text: str, name: str) -> list[Any]:
    """The documents of a YAML stream as plain data (ruamel's safe loader), within the bounds.

    Syntax errors are left to the caller (`ruamel.yaml.error.YAMLError`), which knows what the
    file was meant to be.
    """
    try:
        documents = list(YAML(typ="safe").load_all(text))
    except RecursionError:
        raise too_deep(name) from None
    check_aliases(documents, text, name)
    return documents
