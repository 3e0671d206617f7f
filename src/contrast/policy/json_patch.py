"""RFC 6902 JSON Patch: the agent's state updates and genpolicy's settings drop-ins.

Both sides of the original use the Rust `json_patch` crate: the Kata agent applies a policy's
`ops` to its data document, genpolicy applies `settings.d/*.json` to its settings. Both apply a
patch whole or not at all, so this does too, and never modifies the input.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from contrast.policy.errors import PolicyError


class JsonPatchError(PolicyError):
    """A JSON patch that is malformed or does not apply to the document."""


_OPERATIONS = ("add", "remove", "replace", "move", "copy", "test")


def is_operation(op: Any) -> bool:
    return (
        isinstance(op, dict)
        and op.get("op") in _OPERATIONS
        and isinstance(op.get("path"), str)
        and ("value" in op or op["op"] not in ("add", "replace", "test"))
        and (isinstance(op.get("from"), str) or op["op"] not in ("move", "copy"))
    )


def apply_patch(document: Any, ops: Sequence[Mapping[str, Any]]) -> Any:
    """`document` with the RFC 6902 `ops` applied; the input is never modified.

    All or nothing, like the agent's `json_patch::patch`: any failing operation raises
    `PatchError` and nothing is changed.
    """
    result = copy.deepcopy(document)
    for index, op in enumerate(ops):
        if not is_operation(op):
            raise JsonPatchError(f"operation {index} is not a valid RFC 6902 operation")
        try:
            result = _apply_operation(result, op)
        except JsonPatchError as error:
            raise JsonPatchError(f"operation {index} ({op['op']} {op['path']}): {error}") from None
    return result


def _apply_operation(document: Any, op: Mapping[str, Any]) -> Any:
    kind, path = op["op"], op["path"]
    if kind == "add":
        return _add(document, path, copy.deepcopy(op["value"]))
    if kind == "remove":
        return _remove(document, path)[0]
    if kind == "replace":
        document = _remove(document, path)[0] if path else document
        return _add(document, path, copy.deepcopy(op["value"]))
    if kind == "test":
        if not _json_equal(_get(document, path), op["value"]):
            raise JsonPatchError("the value differs")
        return document
    value = copy.deepcopy(_get(document, op["from"]))
    if kind == "move":
        if path.startswith(op["from"] + "/"):
            raise JsonPatchError("cannot move a value into itself")
        document = _remove(document, op["from"])[0]
    return _add(document, path, value)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"{path!r} is not a JSON pointer")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], part: str, *, insert: bool) -> int:
    if insert and part == "-":
        return len(container)
    if not part.isdigit() or (part != "0" and part.startswith("0")):
        raise JsonPatchError(f"{part!r} is not an array index")
    index = int(part)
    if index > len(container) or (index == len(container) and not insert):
        raise JsonPatchError(f"index {index} is out of range")
    return index


def _parent(document: Any, path: str) -> tuple[Any, str]:
    parts = _pointer(path)
    node = document
    for part in parts[:-1]:
        node = _child(node, part)
    return node, parts[-1]


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        if part not in node:
            raise JsonPatchError(f"{part!r} does not exist")
        return node[part]
    if isinstance(node, list):
        return node[_index(node, part, insert=False)]
    raise JsonPatchError(f"{part!r} is below a value that is not a container")


def _get(document: Any, path: str) -> Any:
    node = document
    for part in _pointer(path):
        node = _child(node, part)
    return node


def _add(document: Any, path: str, value: Any) -> Any:
    if path == "":
        return value
    parent, part = _parent(document, path)
    if isinstance(parent, dict):
        parent[part] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, part, insert=True), value)
    else:
        raise JsonPatchError("the parent is not a container")
    return document


def _remove(document: Any, path: str) -> tuple[Any, Any]:
    if path == "":
        raise JsonPatchError("cannot remove the whole document")
    parent, part = _parent(document, path)
    if isinstance(parent, dict):
        if part not in parent:
            raise JsonPatchError(f"{part!r} does not exist")
        return document, parent.pop(part)
    if isinstance(parent, list):
        return document, parent.pop(_index(parent, part, insert=False))
    raise JsonPatchError("the parent is not a container")


def _json_equal(left: Any, right: Any) -> bool:
    """JSON equality: unlike Python's, `true` is not `1`."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    return bool(type(left) is type(right) or {type(left), type(right)} <= {int, float}) and (
        left == right
    )
