"""The Kubernetes kinds that run pods, and where each keeps its pod template.

Every consumer (runtime-class resolution, injection, policies, the manifest) sees a resource
through `Workload`, so the knowledge of where a CronJob hides its pod spec lives here only.
Resources stay the mappings the YAML reader produced (ruamel's round-trip maps are dicts), so
changes made through a `Workload` land in the document that is written back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from contrast.errors import ContrastError

# kind → keys leading from the resource to its pod template ({metadata, spec}); () = the Pod itself
POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


CONTRAST_ANNOTATION_PREFIX = "contrast.edgeless.systems/"
ROLE_ANNOTATION = f"{CONTRAST_ANNOTATION_PREFIX}pod-role"
WORKLOAD_SECRET_ID_ANNOTATION = f"{CONTRAST_ANNOTATION_PREFIX}workload-secret-id"
COORDINATOR_ROLE = "coordinator"


class ResourceError(ContrastError):
    """A Kubernetes resource that cannot be understood."""


def _mapping(parent: MutableMapping[str, Any], key: str, *where: str) -> MutableMapping[str, Any]:
    """`parent[key]`, an empty mapping added if it is missing; `where` are the names of the
    path to `parent`, joined into the message only if it is not a mapping."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    # A dict first: the ABC check costs a microsecond, and this runs some 300 times a workload.
    if not isinstance(value, dict) and not isinstance(value, MutableMapping):
        raise ResourceError(f"{'.'.join(where)}.{key} is not a mapping")
    return value


@dataclass(frozen=True)
class Workload:
    """A resource that runs pods, with access to its pod template.

    `source` names the resource in messages (`resources/app.yml: Deployment/web`).
    """

    resource: MutableMapping[str, Any]
    source: str = ""

    @property
    def kind(self) -> str:
        return str(self.resource.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.resource.get("apiVersion", ""))

    @property
    def metadata(self) -> MutableMapping[str, Any]:
        return _mapping(self.resource, "metadata", self.kind)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def generate_name(self) -> str:
        return str(self.metadata.get("generateName") or "")

    @property
    def namespace(self) -> str:
        """The namespace as written; "" when the resource leaves it to `kubectl apply`."""
        return str(self.metadata.get("namespace") or "")

    @property
    def pod_template(self) -> MutableMapping[str, Any]:
        """The mapping holding the pod's `metadata` and `spec` (the resource itself for a Pod)."""
        kind = self.kind
        node = self.resource
        path = POD_TEMPLATE_PATHS[kind]
        for depth, key in enumerate(path):
            child = node.get(key)
            # A dict is taken as it is: this runs some 80 times a workload.
            node = child if type(child) is dict else _mapping(node, key, kind, *path[:depth])
        return node

    @property
    def pod_metadata(self) -> MutableMapping[str, Any]:
        return _mapping(self.pod_template, "metadata", "pod template")

    @property
    def pod_annotations(self) -> MutableMapping[str, Any]:
        return _mapping(self.pod_metadata, "annotations", "pod template metadata")

    @property
    def pod_spec(self) -> MutableMapping[str, Any]:
        return _mapping(self.pod_template, "spec", "pod template")

    @property
    def runtime_class_name(self) -> str:
        return str(self.pod_spec.get("runtimeClassName") or "")

    @property
    def default_workload_secret_id(self) -> str:
        """`<group|core>/<version>/<Kind>/<namespace>/<name>`, as the original derives it."""
        group, _, version = self.api_version.rpartition("/")
        namespace = self.namespace or "default"
        return f"{group or 'core'}/{version}/{self.kind}/{namespace}/{self.name}"

    @property
    def workload_secret_id(self) -> str:
        """The `workload-secret-id` annotation, or the default derived from the name."""
        return self.annotation(WORKLOAD_SECRET_ID_ANNOTATION) or self.default_workload_secret_id

    def pod_annotation(self, name: str) -> str | None:
        """One pod annotation, or None; unlike `pod_annotations` it never adds an empty mapping.

        Reading must not change the document, or an untouched file would be rewritten.
        """
        return _annotation(self.pod_template, name)

    def annotation(self, name: str) -> str | None:
        """A Contrast annotation (`contrast.edgeless.systems/…`), or None when absent.

        The original reads these from the workload's own metadata (its mutators get the
        Deployment's `ObjectMeta`), while its guides also show them on the pod template; users
        follow either, so both places count. One annotation with two different values is
        refused rather than resolved by a precedence rule nobody would guess.
        """
        on_template = self.pod_annotation(name)
        if self.kind == "Pod":
            return on_template
        on_workload = _annotation(self.resource, name)
        if on_workload is not None and on_template is not None and on_workload != on_template:
            template_path = ".".join((*POD_TEMPLATE_PATHS[self.kind], "metadata", "annotations"))
            raise ResourceError(
                f"{self.describe()}: annotation {name} is {on_workload!r} in"
                f" metadata.annotations but {on_template!r} in {template_path}",
                hint="keep it in one place, or give both the same value",
            )
        return on_template if on_template is not None else on_workload

    @property
    def role(self) -> str:
        """The `contrast.edgeless.systems/pod-role` annotation ("" when absent)."""
        return self.annotation(ROLE_ANNOTATION) or ""

    @property
    def is_coordinator(self) -> bool:
        return self.role == COORDINATOR_ROLE

    def containers(self) -> list[MutableMapping[str, Any]]:
        """The regular containers (read without adding anything to the document)."""
        return _containers(self.pod_template, "containers", self.describe)

    def init_containers(self) -> list[MutableMapping[str, Any]]:
        """The init containers, native sidecars (`restartPolicy: Always`) included."""
        return _containers(self.pod_template, "initContainers", self.describe)

    def ephemeral_containers(self) -> list[MutableMapping[str, Any]]:
        """Debug containers of a running Pod (`kubectl debug`); not among `all_containers`."""
        return _containers(self.pod_template, "ephemeralContainers", self.describe)

    def all_containers(self) -> list[MutableMapping[str, Any]]:
        """Init containers first, then regular containers: the order the pod starts them."""
        return self.init_containers() + self.containers()

    def describe(self) -> str:
        name = f"{self.kind}/{self.name or self.generate_name}"
        return f"{self.source}: {name}" if self.source else name


def is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """`isinstance(value, Mapping)`, a dict (or subclass: ruamel's nodes) tested first.

    The ABC check costs about a microsecond, and resources are walked hundreds of times a
    workload; plain and round-trip documents are dicts.
    """
    return isinstance(value, (dict, Mapping))


def _annotation(resource: Mapping[str, Any], name: str) -> str | None:
    """`metadata.annotations[name]` of a resource or pod template, read without adding to it."""
    metadata = resource.get("metadata")
    annotations = metadata.get("annotations") if is_mapping(metadata) else None
    if not is_mapping(annotations) or name not in annotations:
        return None
    value = annotations[name]
    return "" if value is None else str(value)


def _containers(
    pod_template: Mapping[str, Any], key: str, where: Callable[[], str]
) -> list[MutableMapping[str, Any]]:
    """The containers under `spec.key`; `where` names the workload if they are not a list of
    them (called only then: the lists are read hundreds of times a run)."""
    spec = pod_template.get("spec")
    if not is_mapping(spec):
        return []
    containers = spec.get(key)
    if containers is None:
        return []
    if not isinstance(containers, list) or not all(
        isinstance(container, (dict, MutableMapping)) for container in containers
    ):
        raise ResourceError(f"{where()}: spec.{key} is not a list of containers")
    return list(containers)


def is_workload(resource: Any) -> bool:
    if not isinstance(resource, MutableMapping):
        return False
    kind = resource.get("kind")
    return isinstance(kind, str) and kind in POD_TEMPLATE_PATHS


def workloads(resources: Iterable[Any], source: str = "") -> Iterator[Workload]:
    """The workloads among `resources`, looking inside `List` resources."""
    for resource in resources:
        if isinstance(resource, MutableMapping) and resource.get("kind") == "List":
            yield from workloads(resource.get("items") or [], source)
        elif is_workload(resource):
            yield Workload(resource, source)
