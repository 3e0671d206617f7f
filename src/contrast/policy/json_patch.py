"""RFC 6902 JSON Patch, the operations settings drop-ins use: add, remove, replace and test.

genpolicy applies `genpolicy-settings.d/*.json` to its settings with these four operations (and
Kata's drop-in examples use nothing else), so `move`/`copy` are refused rather than half-supported.
The document is never modified in place: a patch either applies whole or raises.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from contrast.errors import ContrastError


class JsonPatchError(ContrastError):
    """A JSON patch that is malformed or does not apply to the document."""


def _pointer(path: Any) -> list[str]:
    """The reference tokens of a JSON pointer (RFC 6901), unescaped."""
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise JsonPatchError(f"JSON pointer {path!r} does not start with '/'")
    if not path:
        return []
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, for_add: bool) -> int:
    if for_add and token == "-":  # noqa: S105 (the append position, not a secret)
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise JsonPatchError(f"{path}: {token!r} is not an array index")
    index = int(token)
    limit = len(container) if for_add else len(container) - 1
    if index > limit:
        raise JsonPatchError(f"{path}: index {index} is out of range")
    return index


def _parent(document: Any, tokens: list[str], path: str) -> Any:
    node = document
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise JsonPatchError(f"{path}: {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, path, for_add=False)]
        else:
            raise JsonPatchError(f"{path}: {token!r} is below a scalar")
    return node


def _get(document: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return document
    parent = _parent(document, tokens, path)
    token = tokens[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise JsonPatchError(f"{path} does not exist")
        return parent[token]
    if isinstance(parent, list):
        return parent[_index(parent, token, path, for_add=False)]
    raise JsonPatchError(f"{path}: {token!r} is below a scalar")


def _apply(document: Any, operation: Mapping[str, Any]) -> Any:
    op = operation.get("op")
    path = operation.get("path")
    tokens = _pointer(path)
    assert isinstance(path, str)
    if op == "test":
        if "value" not in operation:
            raise JsonPatchError(f"test of {path} has no value")
        if _get(document, path) != operation["value"]:
            raise JsonPatchError(f"test failed: {path} is not {operation['value']!r}")
        return document
    if op not in ("add", "remove", "replace"):
        raise JsonPatchError(
            f"JSON patch operation {op!r} is not supported (add/remove/replace/test)"
        )
    if op != "remove" and "value" not in operation:
        raise JsonPatchError(f"{op} of {path} has no value")
    value = copy.deepcopy(operation.get("value"))
    if not tokens:
        if op == "remove":
            raise JsonPatchError("cannot remove the whole document")
        return value
    parent = _parent(document, tokens, path)
    token = tokens[-1]
    if isinstance(parent, dict):
        if op != "add" and token not in parent:
            raise JsonPatchError(f"{op}: {path} does not exist")
        if op == "remove":
            del parent[token]
        else:
            parent[token] = value
    elif isinstance(parent, list):
        index = _index(parent, token, path, for_add=op == "add")
        if op == "add":
            parent.insert(index, value)
        elif op == "remove":
            del parent[index]
        else:
            parent[index] = value
    else:
        raise JsonPatchError(f"{path}: {token!r} is below a scalar")
    return document


def apply_patch(document: Any, patch: Any) -> Any:
    """`document` with `patch` applied; the input is left untouched."""
    if not isinstance(patch, list):
        raise JsonPatchError("a JSON patch must be an array of operations")
    result = copy.deepcopy(document)
    for number, operation in enumerate(patch):
        if not isinstance(operation, Mapping):
            raise JsonPatchError(f"operation {number} of the JSON patch is not an object")
        result = _apply(result, operation)
    return result
