"""Kubernetes' own OpenAPI schema for the resources `generate` reads in depth.

The original decodes resources into typed Go structs, so a field of the wrong type (a string
where a container's `lifecycle` object belongs, a number as an annotation value) stops it with
the field's name. Python reads the YAML as it comes, so without this check such a value travels
into the policy generator and fails there without saying where. kubectl would refuse the
resource as well, so nothing valid is lost. Unknown fields stay allowed: a cluster newer than
the bundled schema knows fields this one does not.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from contrast.kuberesource.workloads import ResourceError
from contrast.kuberesource.yamlio import to_plain

# Long values (an initdata annotation) are cut in messages, which stay one readable line.
MESSAGE_LIMIT = 200


class SchemaError(ResourceError):
    """A resource that does not follow the Kubernetes schema of its kind."""


def check(resource: Mapping[str, Any], where: str) -> None:
    """Refuse `resource` unless it validates against its kind's Kubernetes schema."""
    api_version, kind = resource.get("apiVersion"), resource.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise SchemaError(
            f"{where}: apiVersion and kind must be strings",
            hint="every Kubernetes resource names its apiVersion and kind",
        )
    validator = _validator(api_version, kind)
    if validator is None:
        raise SchemaError(
            f"{where}: {api_version} {kind} is not a Kubernetes {_version()} resource",
            hint="use an apiVersion that Kubernetes still serves, e.g. apps/v1",
        )
    # Imported here: jsonschema costs ~0.1 s, which only generate should pay.
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped]  # noqa: PLC0415

    plain = to_plain(resource)
    error = best_match(validator.iter_errors(plain))
    if error is not None:
        place = _path(error.absolute_path) or "the resource"
        raise SchemaError(
            f"{where}: {place}: {_shorten(error.message)}",
            hint="fix that field; kubectl would refuse the resource as well",
        )
    null = _null_entry(plain, [])
    if null is not None:
        raise SchemaError(
            f"{where}: {_path(null)}: a list entry is null",
            hint="remove the entry or give it a value (the API server reads it as an empty one)",
        )


def _null_entry(value: Any, path: list[Any]) -> list[Any] | None:
    """Where a list holds null, which the bundled schemas allow but the API server does not.

    Kubernetes decodes a null entry as the zero value of the list's type: an unnamed volume
    mount or container, which it then refuses; `generate` would stumble over it first.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            found = _null_entry(item, [*path, key])
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = [*path, index] if item is None else _null_entry(item, [*path, index])
            if found is not None:
                return found
    return None


@functools.cache
def _version() -> str:
    import kubernetes_validate  # type: ignore[import-untyped]  # noqa: PLC0415

    version: str = kubernetes_validate.latest_version()
    return version


@functools.cache
def _definitions(directory: str, version: str) -> Any:
    from kubernetes_validate.utils import schema_contents  # type: ignore[import-untyped]  # noqa: PLC0415
    from referencing import Resource  # noqa: PLC0415

    return Resource.from_contents(schema_contents(f"{directory}/_definitions.json", version))


@functools.lru_cache(maxsize=64)
def _validator(api_version: str, kind: str) -> Any:
    """The validator of one kind, built once: building it loads the 5 MB definitions.

    kubernetes_validate.validate rebuilds it on every call (7 ms a resource); kept, a resource
    validates in about 0.25 ms. The schema files are the package's own, found the way its
    `validate` finds them (non-strict: unknown fields are allowed).
    """
    # Imported here: jsonschema and the schemas cost ~0.1 s, which only generate should pay.
    import jsonschema  # type: ignore[import-untyped]  # noqa: PLC0415
    from kubernetes_validate.utils import schema_contents  # noqa: PLC0415
    from referencing import Registry, Resource  # noqa: PLC0415

    version = _version()
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    directory = f"kubernetes-json-schema/v{version}-local"
    try:
        schema = schema_contents(f"{directory}/{kind.lower()}-{group}.json", version)
    except FileNotFoundError:
        return None
    registry = _definitions(directory, version) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def check_all(resources: Iterable[tuple[Mapping[str, Any], str]]) -> None:
    for resource, where in resources:
        check(resource, where)


def prepare(resources: Iterable[Mapping[str, Any]]) -> None:
    """Build the validators that checking `resources` needs, here and once.

    For `generate`, before worker processes check the resources: they inherit them instead of
    each loading the 5 MB definitions again.
    """
    from jsonschema.exceptions import best_match  # noqa: F401, PLC0415 - what check() imports

    for resource in resources:
        api_version, kind = resource.get("apiVersion"), resource.get("kind")
        if isinstance(api_version, str) and isinstance(kind, str):
            _validator(api_version, kind)


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def _shorten(message: str) -> str:
    message = " ".join(message.split())
    return message if len(message) <= MESSAGE_LIMIT else f"{message[: MESSAGE_LIMIT - 1]}…"
