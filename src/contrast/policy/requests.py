"""Kata agent requests, normalised to the exact JSON the agent hands to its policy.

The agent serialises each ttRPC request (a rust-protobuf struct with serde derives) before it
queries `data.agent_policy.<name>`: every field is present with its default, unset singular
messages are `null`, enums are integers, `bytes` are integer lists, and unknown keys never
arrive. Kata's rules depend on all of this (`count()` of a missing list is undefined, so an
allowed request would be denied), which is why every request is passed through the field schema
in `assets/agent-request-schema.json` before evaluation (research/kata-agent-policy-inputs.md §3).

`CopyFileRequest` is special: the agent evaluates a pre-processed form (`path`, `file_type`,
`symlink_target`, …; §3.3), and that is the form accepted here too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from contrast.policy.errors import PolicyError

SCHEMA_RESOURCE = "assets/agent-request-schema.json"
COPY_FILE_TYPES = ("Unknown", "Regular", "Directory", "Symlink")

# Protobuf integer types and their ranges; an out-of-range value would fail the agent's decoding.
_INTEGER_RANGES = {
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
    "sint32": (-(2**31), 2**31 - 1),
    "sint64": (-(2**63), 2**63 - 1),
    "fixed32": (0, 2**32 - 1),
    "fixed64": (0, 2**64 - 1),
}
# Enums are int32 on the wire and integers in the agent's JSON.
_ENUM_RANGE = _INTEGER_RANGES["int32"]


class RequestError(PolicyError):
    """A request that the agent could not have decoded, or whose name it never queries."""


@dataclass(frozen=True)
class FieldSpec:
    """One protobuf field as the agent's JSON carries it.

    `kind` is scalar | enum | message | repeated-scalar | repeated-message | map | oneof;
    `type` the proto type (a message name for messages, the value type for maps).
    """

    name: str
    kind: str
    type: str | None
    default: Any


@dataclass(frozen=True)
class RequestSchema:
    """The field lists of every message the agent's policy sees, and the query names."""

    messages: Mapping[str, tuple[FieldSpec, ...]]
    rpc_to_query: Mapping[str, str]
    copy_file_fields: tuple[FieldSpec, ...]
    copy_file_query: str

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RequestSchema:
        messages = {
            name: tuple(
                FieldSpec(f["field"], f["kind"], f.get("type"), f.get("default")) for f in fields
            )
            for name, fields in document["messages"].items()
        }
        copy_file = document["policy_copy_file_request"]
        copy_fields = tuple(
            FieldSpec(f["field"], "copy-file", None, f.get("default")) for f in copy_file["fields"]
        )
        return cls(messages, dict(document["rpc_to_query"]), copy_fields, copy_file["query"])

    @property
    def request_names(self) -> tuple[str, ...]:
        """Every name the agent queries (`data.agent_policy.<name>`), sorted."""
        return tuple(sorted({*self.rpc_to_query.values(), self.copy_file_query}))

    def query_name(self, name: str) -> str:
        """The query name for a request name or an rpc name (`ReadStdout` → `ReadStreamRequest`)."""
        if name in self.request_names:
            return name
        if name in self.rpc_to_query:
            return self.rpc_to_query[name]
        raise RequestError(
            f"unknown request name {name!r}",
            hint="use one of " + ", ".join(self.request_names),
        )

    def normalise(self, name: str, request: Any) -> dict[str, Any]:
        """The agent's JSON for `request`: defaults filled, unknown keys dropped, types checked."""
        kind = self.query_name(name)
        if not isinstance(request, Mapping):
            raise RequestError(f"{kind}: the request must be a JSON object")
        if kind == self.copy_file_query:
            return self._copy_file(request)
        return self._message(kind, request, kind)

    def _message(self, message: str, value: Mapping[str, Any], where: str) -> dict[str, Any]:
        return {
            spec.name: self._field(spec, value.get(spec.name), f"{where}.{spec.name}")
            for spec in self.messages[message]
        }

    def _field(self, spec: FieldSpec, value: Any, where: str) -> Any:
        if value is None:
            # An absent field and an explicit null both take the agent's default.
            return _fresh(spec.default)
        if spec.kind == "message":
            if not isinstance(value, Mapping):
                raise RequestError(f"{where} must be an object or null")
            return self._message(str(spec.type), value, where)
        if spec.kind == "repeated-message":
            items = _list(value, where)
            return [
                self._repeated_message(str(spec.type), item, f"{where}[{i}]")
                for i, item in enumerate(items)
            ]
        if spec.kind == "repeated-scalar":
            items = _list(value, where)
            return [_scalar(str(spec.type), item, f"{where}[{i}]") for i, item in enumerate(items)]
        if spec.kind == "map":
            if not isinstance(value, Mapping):
                raise RequestError(f"{where} must be an object")
            return {
                str(key): _scalar(str(spec.type), item, f"{where}[{key!r}]")
                for key, item in value.items()
            }
        if spec.kind == "enum":
            return _integer(value, _ENUM_RANGE, where)
        if spec.kind == "oneof":
            # Only LinuxSyscall.ErrnoRet; no rule reads it, so it passes through as given.
            return value
        return _scalar(str(spec.type), value, where)

    def _repeated_message(self, message: str, item: Any, where: str) -> dict[str, Any]:
        if not isinstance(item, Mapping):
            raise RequestError(f"{where} must be an object")
        return self._message(message, item, where)

    def _copy_file(self, request: Mapping[str, Any]) -> dict[str, Any]:
        where = self.copy_file_query
        result: dict[str, Any] = {}
        for spec in self.copy_file_fields:
            value = request.get(spec.name)
            path = f"{where}.{spec.name}"
            if value is None:
                result[spec.name] = _fresh(spec.default)
            elif spec.name == "file_type":
                if value not in COPY_FILE_TYPES:
                    raise RequestError(
                        f"{path} is {value!r}", hint="use one of " + ", ".join(COPY_FILE_TYPES)
                    )
                result[spec.name] = value
            elif isinstance(spec.default, str) or spec.name == "symlink_target":
                result[spec.name] = _scalar("string", value, path)
            else:
                result[spec.name] = _integer(value, _INTEGER_RANGES["int64"], path)
        return result


def _fresh(default: Any) -> Any:
    """A default the caller may mutate without touching the schema's copy."""
    if isinstance(default, list):
        return list(default)
    if isinstance(default, dict):
        return dict(default)
    return default


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise RequestError(f"{where} must be a list")
    return value


def _integer(value: Any, bounds: tuple[int, int], where: str) -> int:
    # JSON has one number type; 3.0 is a valid integer for serde only if it is written 3.
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{where} must be an integer, not {json.dumps(value)}")
    low, high = bounds
    if not low <= value <= high:
        raise RequestError(f"{where} = {value} is outside [{low}, {high}]")
    return value


def _scalar(proto_type: str, value: Any, where: str) -> Any:
    if proto_type == "string":
        if not isinstance(value, str):
            raise RequestError(f"{where} must be a string, not {json.dumps(value)}")
        return value
    if proto_type == "bool":
        if not isinstance(value, bool):
            raise RequestError(f"{where} must be true or false, not {json.dumps(value)}")
        return value
    if proto_type == "bytes":
        return [
            _integer(byte, (0, 255), f"{where}[{i}]") for i, byte in enumerate(_list(value, where))
        ]
    if proto_type in ("double", "float"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RequestError(f"{where} must be a number, not {json.dumps(value)}")
        return value
    if proto_type in _INTEGER_RANGES:
        return _integer(value, _INTEGER_RANGES[proto_type], where)
    raise RequestError(f"{where} has the unsupported proto type {proto_type!r}")


@cache
def default_schema() -> RequestSchema:
    """The schema shipped with the package (Kata at the commit named in the asset)."""
    text = resources.files("contrast.policy").joinpath(SCHEMA_RESOURCE).read_text()
    return RequestSchema.from_json(json.loads(text))


def request_names() -> tuple[str, ...]:
    return default_schema().request_names


def query_name(name: str) -> str:
    return default_schema().query_name(name)


def normalise_request(name: str, request: Any) -> dict[str, Any]:
    """`request` exactly as the agent would pass it to `data.agent_policy.<name>`."""
    return default_schema().normalise(name, request)
