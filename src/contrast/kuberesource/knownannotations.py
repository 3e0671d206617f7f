"""Every `contrast.edgeless.systems/…` annotation this release knows, and the check that no other
one (nor a value it cannot read) passes `generate` unnoticed.

A user who marks a database `secure-pv` and gets no encryption because the annotation was
misspelt, or is one this release does not build, is worse off than one who gets an error; so
`generate` refuses every Contrast annotation that is not in `TABLE`, every value outside an
annotation's accepted forms, and every annotation the table marks as recognised but not built
here. The README's "Annotations" section is `markdown_table()` of the same table (a test keeps
the two equal), so the documentation cannot list an annotation the check does not know.

The values are checked for their form only; what needs the rest of the pod (the devices of
`secure-pv`, the sidecar's listeners) is checked where the pod is changed (inject.py).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from contrast.kuberesource.quantity import QuantityError, parse_quantity
from contrast.kuberesource.workloads import (
    CONTRAST_ANNOTATION_PREFIX,
    COORDINATOR_ROLE,
    POD_TEMPLATE_PATHS,
    ResourceError,
    is_mapping,
)
from contrast.platforms import PLATFORMS
from contrast.servicemesh.annotations import ServiceMeshError, parse_egress, parse_ingress

NODE_INSTALLER_ROLE = "contrast-node-installer"
# A Kubernetes volume name (DNS-1123 label), as the two halves of `secure-pv` must be.
VOLUME_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
WORKLOADS = "workloads"
SERVICES = "Service"


class AnnotationError(ResourceError):
    """A Contrast annotation that is unknown, malformed, or not built by this release."""


@dataclass(frozen=True)
class Annotation:
    """One row of the table: the key, where it goes, the values it takes and what it does.

    `check` returns what is wrong with a value (None when the value is accepted). An
    annotation of the original that this release recognises but does not build would accept
    only the value that asks for nothing, its check saying so for the rest (none is left).
    """

    name: str
    applies_to: str  # WORKLOADS (the resource or its pod template) or a kind, e.g. "Service"
    forms: str
    effect: str
    check: Callable[[str], str | None]

    @property
    def key(self) -> str:
        return f"{CONTRAST_ANNOTATION_PREFIX}{self.name}"


def _one_of(*values: str, fold: bool = False) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        seen = value.strip().lower() if fold else value
        return None if seen in values else "is not one of the accepted values"

    return check


def _servicemesh(parse: Callable[[str], object], empty_ok: bool) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if not value.strip():
            return None if empty_ok else "is empty"
        try:
            parse(value)
        except ServiceMeshError as error:
            return f"does not parse: {error.explain()}"
        return None

    return check


def _port(value: str) -> str | None:
    text = value.strip()
    if text.isdigit() and 0 < int(text) < 65536:
        return None
    return "is not a port"


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "is empty"


def parse_secure_pv(value: str) -> tuple[str, str] | None:
    """`DEVICE:MOUNT` as (device volume, mount volume), or None when it is not of that form."""
    device, separator, mount = value.partition(":")
    if not separator or not VOLUME_NAME.match(device) or not VOLUME_NAME.match(mount):
        return None
    return device, mount


def _secure_pv(value: str) -> str | None:
    if parse_secure_pv(value) is None:
        return "is not DEVICE:MOUNT (two volume names)"
    return None


def image_store_size_problem(value: str) -> str | None:
    """What is wrong with an `image-store-size` value: `"0"` (no store) or a positive size."""
    text = value.strip()
    if text == "0":
        return None
    try:
        size = parse_quantity(text)
    except QuantityError:
        return "is not a Kubernetes quantity"
    if size <= 0:
        return 'is not a positive size ("0", without a unit, disables the store)'
    if size != size.to_integral_value():
        return "is not a whole number of bytes"
    return None


TABLE: tuple[Annotation, ...] = (
    Annotation(
        "pod-role", WORKLOADS, f"`{COORDINATOR_ROLE}`, `{NODE_INSTALLER_ROLE}`",
        "marks the Coordinator (no Initializer or sidecar, its own identity in the manifest) or"
        " the node installer; set by `contrast coordinator-resources` and `contrast runtime`",
        _one_of(COORDINATOR_ROLE, NODE_INSTALLER_ROLE),
    ),
    Annotation(
        "skip-initializer", WORKLOADS, "`true`, `false`",
        "`true`: no Initializer is injected (the pod gets no mesh certificate or workload"
        " secret)",
        _one_of("true", "false", fold=True),
    ),
    Annotation(
        "servicemesh-ingress", WORKLOADS, "`name#port#disableTLS` entries joined by `##`",
        "injects the service-mesh sidecar; listed ports are plain (`true`) or TLS without"
        " client certificates (`false`), every other port requires mutual TLS",
        _servicemesh(parse_ingress, empty_ok=True),
    ),
    Annotation(
        "servicemesh-egress", WORKLOADS,
        "`name#listenIP:port#remoteHost:port` entries joined by `##`",
        "injects the sidecar; the app dials the loopback listener, the sidecar dials the remote"
        " with the pod's mesh certificate",
        _servicemesh(parse_egress, empty_ok=False),
    ),
    Annotation(
        "servicemesh-admin-interface-port", WORKLOADS, "a port, 1 to 65535",
        "injects the sidecar and serves Envoy's admin interface on that port",
        _port,
    ),
    Annotation(
        "workload-secret-id", WORKLOADS, "a non-empty string",
        "the ID the workload secret is derived from (default"
        " `<group>/<version>/<Kind>/<namespace>/<name>`); pods with the same ID share it",
        _non_empty,
    ),
    Annotation(
        "secure-pv", WORKLOADS, "`DEVICE:MOUNT`, two volume names",
        "the Initializer formats the block device `DEVICE` (a PVC, an iSCSI volume or a `Block`"
        " volume claim template) as LUKS2 with integrity, keyed by the workload secret, and"
        " mounts it on the `emptyDir` `MOUNT`, which containers mount with"
        " `mountPropagation: HostToContainer`",
        _secure_pv,
    ),
    Annotation(
        "image-store-size", WORKLOADS, "`0`, or a size such as `250Gi` (a quantity)",
        "with `generate --inject-image-store`: the size of the pod's ephemeral block volume for"
        " its images (default `10Gi`), bound at `/dev/image_store` by the `pvc-holder` sidecar;"
        " `0`: no image store for this pod. Without the flag it does nothing (a warning), as in"
        " the original",
        image_store_size_problem,
    ),
    Annotation(
        "platform", WORKLOADS, ", ".join(f"`{p.display_name}`" for p in PLATFORMS),
        "the platform a node-installer DaemonSet installs; set by `contrast runtime`",
        _one_of(*(p.display_name for p in PLATFORMS)),
    ),
    Annotation(
        "expose-service", SERVICES, "`true`, `false`",
        "none in `generate`, as in the original, whose release tooling alone reads it (to make"
        " its demo Services `type: LoadBalancer`); it is accepted so that the original's YAML"
        " passes",
        _one_of("true", "false"),
    ),
)  # fmt: skip
BY_KEY: dict[str, Annotation] = {annotation.key: annotation for annotation in TABLE}


def markdown_table() -> str:
    """The README's table of annotations (a test checks that the README holds exactly this)."""
    lines = ["| annotation | on | accepted values | effect |", "| --- | --- | --- | --- |"]
    for annotation in TABLE:
        on = "workload or pod template" if annotation.applies_to == WORKLOADS else "Service"
        lines.append(f"| `{annotation.key}` | {on} | {annotation.forms} | {annotation.effect} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The check


def _annotations_of(node: Any) -> Iterator[tuple[str, Any]]:
    metadata = node.get("metadata") if is_mapping(node) else None
    annotations = metadata.get("annotations") if is_mapping(metadata) else None
    if is_mapping(annotations):
        for key, value in annotations.items():
            if isinstance(key, str) and key.startswith(CONTRAST_ANNOTATION_PREFIX):
                yield key, value


def _pod_template(resource: Mapping[str, Any]) -> Any:
    node: Any = resource
    for key in POD_TEMPLATE_PATHS.get(str(resource.get("kind")), ()):
        node = node.get(key) if is_mapping(node) else None
    return node


def describe(resource: Mapping[str, Any], source: str) -> str:
    """`file: Kind/namespace/name`, the namespace `default` when the resource names none."""
    metadata = resource.get("metadata")
    metadata = metadata if is_mapping(metadata) else {}
    name = metadata.get("name") or metadata.get("generateName") or ""
    namespace = metadata.get("namespace") or "default"
    where = f"{resource.get('kind', '')}/{namespace}/{name}"
    return f"{source}: {where}" if source else where


def _accepted(annotation: Annotation) -> str:
    return f"accepted: {annotation.forms.replace('`', '')}"


def _problem(key: str, value: Any, kind: str, where: Callable[[], str]) -> AnnotationError | None:
    annotation = BY_KEY.get(key)
    if annotation is None:
        # Compared without the prefix, which every key shares.
        name = key[len(CONTRAST_ANNOTATION_PREFIX) :]
        close = difflib.get_close_matches(name, [a.name for a in TABLE], n=1, cutoff=0.75)
        known = ", ".join(a.name for a in TABLE)
        return AnnotationError(
            f"{where()}: unknown annotation {key}",
            hint=f"did you mean {CONTRAST_ANNOTATION_PREFIX}{close[0]}?"
            if close
            else f"Contrast annotations are {CONTRAST_ANNOTATION_PREFIX}{{{known}}}",
        )
    if annotation.applies_to == WORKLOADS:
        applies = kind in POD_TEMPLATE_PATHS
    else:
        applies = kind == annotation.applies_to
    if not applies:
        on = "workloads" if annotation.applies_to == WORKLOADS else f"{annotation.applies_to}s"
        return AnnotationError(
            f"{where()}: annotation {key} does nothing on a {kind or 'resource without a kind'}",
            hint=f"it belongs on {on}",
        )
    text = "" if value is None else value if isinstance(value, str) else None
    if text is None:
        return AnnotationError(
            f"{where()}: annotation {key} is not a string",
            hint=f"quote it; {_accepted(annotation)}",
        )
    problem = annotation.check(text)
    if problem is None:
        return None
    return AnnotationError(
        f"{where()}: annotation {key}={text!r} {problem}", hint=_accepted(annotation)
    )


def check_resource(resource: Any, source: str = "") -> None:
    """Raise AnnotationError for the first Contrast annotation of `resource` (its own metadata
    and, for a workload, its pod template's) that the table does not accept; `List`s are
    walked."""
    if not is_mapping(resource):
        return
    kind = resource.get("kind")
    if kind == "List":
        items = resource.get("items")
        for item in items if isinstance(items, list) else ():
            check_resource(item, source)
        return
    kind = kind if isinstance(kind, str) else ""
    found = list(_annotations_of(resource))
    if kind in POD_TEMPLATE_PATHS and kind != "Pod":
        found.extend(_annotations_of(_pod_template(resource)))
    for key, value in found:
        error = _problem(key, value, kind, lambda: describe(resource, source))
        if error is not None:
            raise error


def check_documents(documents: Iterable[Any], source: str = "") -> None:
    """`check_resource` of each document of a file named `source`."""
    for document in documents:
        check_resource(document, source)
