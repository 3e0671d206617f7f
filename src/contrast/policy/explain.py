"""Why a request was denied: the policy's prints plus a field-by-field comparison.

A Kata-style policy carries its expectations as data (`policy_data`: one entry per container,
plus `common`, `sandbox` and `request_defaults`), so a denial can be explained without knowing
the rules: find the policy entry the request was meant to match and list the fields that differ.
Policy strings hold placeholders and regexes (`$(sfprefix)`, `$(root_path)`, `$(bundle-id)`,
`^…$`) that the rules resolve at evaluation time; a field whose value only differs from the policy
text because of such a placeholder is treated as matching, so it is never given as the reason.

The comparison is a guide written against Kata's rules (research/kata-agent-policy-inputs.md §3,
§4, research/policy.md §3); the verdict itself always comes from the policy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contrast.policy.engine import Decision

# Placeholders the rules fill in themselves; anything else in $(…) is matched loosely.
BUNDLE_ID = "([0-9a-f]{64}|[a-z0-9][a-z0-9.-]*)"
_FIXED_PLACEHOLDERS = {
    "bundle-id": BUNDLE_ID,
    "sandbox-id": "[a-z0-9]{64}",
    "b64_device_id": "[A-Za-z0-9_=-]+",
}
_PLACEHOLDER = re.compile(r"\$\(([A-Za-z0-9_-]+)\)")
_IP_PLACEHOLDERS = ("pod-ip", "host-ip")
_MAX_DIFFERENCES = 8
# Rules may print a line per policy container; text output keeps the first few, shortened.
_MAX_PRINTS = 4
_MAX_PRINT_LENGTH = 300
_CONTAINER_NAME = "io.kubernetes.cri.container-name"
_CONTAINER_TYPE = "io.kubernetes.cri.container-type"
_SANDBOX_NAME = "io.kubernetes.cri.sandbox-name"
_CRI_PREFIX = "io.kubernetes.cri."
_IMAGE_NAME = "io.kubernetes.cri.image-name"
_IGNORED_NAMESPACES = {"network", "cgroup"}
_VFIO_PATH = "/dev/vfio/devices/vfio"
_CDI_ANNOTATION = re.compile(r"cdi\.k8s\.io/vfio([0-9]+)")
_NO_POLICY_DATA = "the policy has no policy_data object to compare the request with"


@dataclass(frozen=True)
class Difference:
    """One field where the request departs from what the policy expects.

    `soft` marks differences that Kata's rules may tolerate (a policy mount the request lacks);
    they are listed after the others and do not count when choosing the closest policy entry.
    """

    field: str
    message: str
    soft: bool = False

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Explanation:
    kind: str
    prints: tuple[str, ...]
    differences: tuple[Difference, ...]
    compared_with: str = ""
    note: str = ""

    def lines(self) -> list[str]:
        lines = [f"policy says: {_shorten(text)}" for text in self.prints[:_MAX_PRINTS]]
        if len(self.prints) > _MAX_PRINTS:
            lines.append(f"policy says {len(self.prints) - _MAX_PRINTS} more (see --output json)")
        if self.compared_with:
            lines.append(f"compared with {self.compared_with}:")
        # Soft differences (tolerated by Kata's rules) only matter when nothing else differs.
        shown = [d for d in self.differences if not d.soft] or list(self.differences)
        lines.extend(f"- {difference}" for difference in shown[:_MAX_DIFFERENCES])
        if len(shown) > _MAX_DIFFERENCES:
            lines.append(f"- … and {len(shown) - _MAX_DIFFERENCES} more")
        if self.note:
            lines.append(self.note)
        elif not self.prints and not shown:
            lines.append(
                "no difference from policy_data found; the rules deny it for another reason"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "prints": list(self.prints),
            "compared_with": self.compared_with,
            "note": self.note,
            "differences": [
                {"field": d.field, "message": d.message, "soft": d.soft} for d in self.differences
            ],
        }


def explain(decision: Decision, policy_data: Any, state: Mapping[str, Any]) -> Explanation:
    """Explain a denied `decision`, given `policy_data` and the state before the request."""
    if not isinstance(policy_data, Mapping):
        return Explanation(decision.kind, decision.prints, (), "", _NO_POLICY_DATA)
    data, request = policy_data, decision.input
    compare = _COMPARISONS.get(decision.kind)
    if compare is None:
        defaults = tuple(_request_default(decision.kind, data))
        return Explanation(decision.kind, decision.prints, defaults)
    compared_with, differences = compare(data, request, state)
    ordered = tuple(sorted(differences, key=lambda d: d.soft))
    return Explanation(decision.kind, decision.prints, ordered, compared_with)


# --- placeholders -------------------------------------------------------------------------------


class Patterns:
    """Matching of policy strings (placeholders, regexes) against request values."""

    def __init__(
        self,
        common: Mapping[str, Any],
        sandbox_name: str | None = None,
        fixed: Mapping[str, str] | None = None,
    ) -> None:
        self.values = {k: v for k, v in common.items() if isinstance(v, str)}
        self.values.update(fixed or {})
        self.lists = {k: v for k, v in common.items() if isinstance(v, list)}
        self.sandbox_name = sandbox_name

    def expand(self, text: str) -> str:
        """`text` with every known placeholder replaced by its regex (recursively)."""
        for _ in range(8):
            expanded = _PLACEHOLDER.sub(lambda m: self._placeholder(m.group(1)), text)
            if expanded == text:
                break
            text = expanded
        return text

    def _placeholder(self, name: str) -> str:
        if name in self.values:
            return self.values[name]
        if name in _FIXED_PLACEHOLDERS:
            return _FIXED_PLACEHOLDERS[name]
        if name in _IP_PLACEHOLDERS:
            return self.values.get("ipv4_a", ".*")
        if name == "sandbox-name" and self.sandbox_name:
            return re.escape(self.sandbox_name)
        return ".*"

    def matches(self, expected: str, actual: str) -> bool:
        """Whether the policy value `expected` admits `actual`."""
        if expected == actual:
            return True
        if "$(" not in expected and not expected.startswith("^"):
            return False
        if self.expand(expected).startswith("^"):
            pattern = self.expand(expected)
        else:
            parts = _PLACEHOLDER.split(expected)
            # split() alternates literal text and placeholder names.
            pattern = "".join(
                re.escape(part) if i % 2 == 0 else self.expand(self._placeholder(part))
                for i, part in enumerate(parts)
            )
            pattern = f"^(?:{pattern})$"
        try:
            return re.search(pattern, actual) is not None
        except re.error:
            return True  # a regex Python cannot read is never blamed

    def search(self, regex: str, actual: str) -> bool:
        try:
            return re.search(self.expand(regex), actual) is not None
        except re.error:
            return False

    def capabilities(self, values: Sequence[Any]) -> set[str]:
        result: set[str] = set()
        for value in values:
            match = _PLACEHOLDER.fullmatch(str(value))
            names = self.lists.get(match.group(1), []) if match else [value]
            result.update(str(name).removeprefix("CAP_") for name in names)
        return result


def _shorten(text: str) -> str:
    if len(text) <= _MAX_PRINT_LENGTH:
        return text
    return text[: _MAX_PRINT_LENGTH - 1] + "…"


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _get(node: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


# --- CreateContainerRequest ---------------------------------------------------------------------

# Fields Kata's rules require to be null or empty in every CreateContainer input.
_MUST_BE_NULL = (
    ("string_user",),
    ("OCI", "Hooks"),
    ("OCI", "Solaris"),
    ("OCI", "Windows"),
    ("OCI", "Linux", "Seccomp"),
    ("OCI", "Linux", "IntelRdt"),
    ("OCI", "Linux", "Resources", "BlockIO"),
    ("OCI", "Linux", "Resources", "Network"),
    ("OCI", "Linux", "Resources", "Pids"),
)
_MUST_BE_EMPTY = (
    ("shared_mounts",),
    ("OCI", "Linux", "GIDMappings"),
    ("OCI", "Linux", "UIDMappings"),
    ("OCI", "Linux", "MountLabel"),
    ("OCI", "Linux", "RootfsPropagation"),
    ("OCI", "Linux", "Resources", "Devices"),
    ("OCI", "Process", "SelinuxLabel"),
    ("OCI", "Process", "User", "Username"),
)


def _create_container(
    data: Mapping[str, Any], request: Mapping[str, Any], state: Mapping[str, Any]
) -> tuple[str, list[Difference]]:
    general = list(_create_container_input(request))
    annotations = _dict(_get(request, "OCI", "Annotations"))
    general.extend(_state_checks(annotations, request, state))
    patterns = Patterns(_dict(data.get("common")), annotations.get(_SANDBOX_NAME))
    containers = [c for c in _list(data.get("containers")) if isinstance(c, Mapping)]
    if not containers:
        return "", [*general, Difference("policy_data.containers", "the policy has none")]
    env_regex = _list(_get(data, "request_defaults", "CreateContainerRequest", "allow_env_regex"))
    candidates = _candidates(containers, annotations)
    scored = []
    for index in candidates:
        differences = list(_container(containers[index], request, patterns, env_regex))
        scored.append((sum(not d.soft for d in differences), index, differences))
    _, best, differences = min(scored, key=lambda item: (item[0], item[1]))
    name = _get(containers[best], "OCI", "Annotations", _CONTAINER_NAME)
    kind = _get(containers[best], "OCI", "Annotations", _CONTAINER_TYPE)
    label = f"policy container {best}" + (
        f" ({name})" if name else " (the pause container)" if kind == "sandbox" else ""
    )
    # The entry's own differences first: they say most about what was meant.
    return label, differences + general


def _create_container_input(request: Mapping[str, Any]) -> Iterator[Difference]:
    for path in _MUST_BE_NULL:
        value = _get(request, *path)
        if value is not None:
            yield Difference(
                ".".join(path), f"the policy requires null, request has {_show(value)}"
            )
    for path in _MUST_BE_EMPTY:
        value = _get(request, *path)
        if value:
            yield Difference(
                ".".join(path), f"the policy requires it empty, request has {_show(value)}"
            )
    if _get(request, "OCI", "Linux", "Resources") is None:
        yield Difference("OCI.Linux.Resources", "the policy's rules need it set (not null)")


def _state_checks(
    annotations: Mapping[str, Any], request: Mapping[str, Any], state: Mapping[str, Any]
) -> Iterator[Difference]:
    stored = state.get("sandbox_name")
    actual = annotations.get(_SANDBOX_NAME)
    if isinstance(stored, str) and actual is not None and stored != actual:
        yield Difference(
            f"Annotations[{_SANDBOX_NAME}]",
            f"an earlier container stored {_show(stored)}, request has {_show(actual)}",
        )
    stored_netns = state.get("network_namespace")
    if isinstance(stored_netns, str):
        paths = [
            n.get("Path", "")
            for n in _list(_get(request, "OCI", "Linux", "Namespaces"))
            if isinstance(n, Mapping) and n.get("Type") == "network"
        ]
        actual_netns = paths[0] if paths else ""
        if actual_netns != stored_netns:
            yield Difference(
                "OCI.Linux.Namespaces[network].Path",
                f"an earlier container stored {_show(stored_netns)},"
                f" request has {_show(actual_netns)}",
            )


def _candidates(
    containers: Sequence[Mapping[str, Any]], annotations: Mapping[str, Any]
) -> list[int]:
    """Policy containers the request could be meant for: same type, then same name."""
    indices = list(range(len(containers)))
    kind = annotations.get(_CONTAINER_TYPE)
    same_kind = [
        i for i in indices if _get(containers[i], "OCI", "Annotations", _CONTAINER_TYPE) == kind
    ]
    indices = same_kind or indices
    name = annotations.get(_CONTAINER_NAME)
    same_name = [
        i for i in indices if _get(containers[i], "OCI", "Annotations", _CONTAINER_NAME) == name
    ]
    return same_name or indices


def _container(
    policy: Mapping[str, Any],
    request: Mapping[str, Any],
    patterns: Patterns,
    env_regex: Sequence[Any],
) -> Iterator[Difference]:
    p_oci, i_oci = _dict(policy.get("OCI")), _dict(request.get("OCI"))
    yield from _equal(
        "sandbox_pidns", policy.get("sandbox_pidns", False), request.get("sandbox_pidns")
    )
    yield from _equal("OCI.Version", p_oci.get("Version"), i_oci.get("Version"))
    yield from _annotations(policy, i_oci, patterns)
    p_root, i_root = _dict(p_oci.get("Root")), _dict(i_oci.get("Root"))
    yield from _equal("OCI.Root.Readonly", p_root.get("Readonly"), i_root.get("Readonly"))
    root_path = p_root.get("Path")
    if isinstance(root_path, str) and not patterns.matches(root_path, str(i_root.get("Path", ""))):
        yield Difference(
            "OCI.Root.Path",
            f"policy expects {_show(patterns.expand(root_path))},"
            f" request has {_show(i_root.get('Path'))}",
        )
    yield from _process(
        "OCI.Process", _dict(p_oci.get("Process")), i_oci.get("Process"), patterns, env_regex
    )
    yield from _mounts(_list(p_oci.get("Mounts")), _list(i_oci.get("Mounts")), patterns)
    yield from _storages(_list(policy.get("storages")), _list(request.get("storages")), patterns)
    yield from _devices(
        _list(policy.get("devices")), _list(request.get("devices")), i_oci.get("Annotations")
    )
    yield from _linux(_dict(p_oci.get("Linux")), _dict(i_oci.get("Linux")))


def _equal(field: str, expected: Any, actual: Any) -> Iterator[Difference]:
    if expected is not None and expected != actual:
        yield Difference(field, f"policy expects {_show(expected)}, request has {_show(actual)}")


def _by_digest(image: str) -> str:
    return " (compared by digest)" if "@" in image else ""


def image_allows(policy_image: str, request_image: str) -> bool:
    """rules.rego's image_allows: by digest when the policy pins one, else by normalized name."""
    if "@" in policy_image:
        return "@" in request_image and _digest(policy_image) == _digest(request_image)
    return _normalized_image(policy_image) == _normalized_image(request_image.partition("@")[0])


def _digest(image: str) -> str:
    return image.split("@", 1)[1].lower()


def _normalized_image(name: str) -> str:
    """containerd's spelling: 'busybox' is docker.io/library/busybox:latest."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        if first == "docker.io" and "/" not in rest:
            name = f"docker.io/library/{rest}"
    elif rest:
        name = f"docker.io/{name}"
    else:
        name = f"docker.io/library/{name}"
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _annotations(
    policy: Mapping[str, Any], i_oci: Mapping[str, Any], patterns: Patterns
) -> Iterator[Difference]:
    p_annotations = _dict(_get(policy, "OCI", "Annotations"))
    i_annotations = _dict(i_oci.get("Annotations"))
    for key in (_CONTAINER_TYPE, _CONTAINER_NAME, "io.katacontainers.pkg.oci.container_type"):
        if key in p_annotations:
            yield from _equal(f"Annotations[{key}]", p_annotations[key], i_annotations.get(key))
    expected_image = p_annotations.get(_IMAGE_NAME)
    if isinstance(expected_image, str):
        actual_image = i_annotations.get(_IMAGE_NAME)
        if not (isinstance(actual_image, str) and image_allows(expected_image, actual_image)):
            yield Difference(
                f"Annotations[{_IMAGE_NAME}]",
                f"policy expects {_show(expected_image)}{_by_digest(expected_image)},"
                f" request has {_show(actual_image)}",
            )
    for key, expected in p_annotations.items():
        if key in (_CONTAINER_TYPE, _CONTAINER_NAME, _IMAGE_NAME):
            continue
        actual = i_annotations.get(key)
        if actual is None or not isinstance(expected, str) or expected == "":
            continue  # absent keys and empty values (filled from state) are not checked here
        if not patterns.matches(expected, str(actual)):
            yield Difference(
                f"Annotations[{key}]",
                f"policy expects {_show(expected)}, request has {_show(actual)}",
            )
    anno_patterns = _dict(policy.get("runtime_anno_patterns"))
    for key, actual in i_annotations.items():
        if key.startswith(_CRI_PREFIX) or key in p_annotations:
            continue
        if any(
            patterns.search(k, key) and patterns.search(str(v), str(actual))
            for k, v in anno_patterns.items()
        ):
            continue
        yield Difference(
            f"Annotations[{key}]", f"not allowed by the policy (request has {_show(actual)})"
        )


def _process(
    where: str,
    policy: Mapping[str, Any],
    request: Any,
    patterns: Patterns,
    env_regex: Sequence[Any],
    *,
    check_args: bool = True,
) -> Iterator[Difference]:
    if not isinstance(request, Mapping):
        if policy:
            yield Difference(where, "the request has no process")
        return
    if check_args:
        yield from _args(
            f"{where}.Args", _list(policy.get("Args")), _list(request.get("Args")), patterns
        )
    yield from _equal(f"{where}.Cwd", policy.get("Cwd", "") if policy else None, request.get("Cwd"))
    yield from _equal(f"{where}.Terminal", policy.get("Terminal"), request.get("Terminal"))
    yield from _equal(
        f"{where}.NoNewPrivileges", policy.get("NoNewPrivileges"), request.get("NoNewPrivileges")
    )
    p_user, i_user = _dict(policy.get("User")), _dict(request.get("User"))
    yield from _equal(f"{where}.User.UID", p_user.get("UID"), i_user.get("UID"))
    yield from _equal(f"{where}.User.GID", p_user.get("GID"), i_user.get("GID"))
    if "AdditionalGids" in p_user:
        expected, actual = (
            sorted(set(_list(p_user["AdditionalGids"]))),
            sorted(set(_list(i_user.get("AdditionalGids")))),
        )
        if expected != actual:
            yield Difference(
                f"{where}.User.AdditionalGids",
                f"policy expects {_show(expected)}, request has {_show(actual)}",
            )
    yield from _env(
        f"{where}.Env", _list(policy.get("Env")), _list(request.get("Env")), patterns, env_regex
    )
    yield from _capabilities(
        f"{where}.Capabilities", policy.get("Capabilities"), request.get("Capabilities"), patterns
    )


def _args(
    where: str, expected: list[Any], actual: list[Any], patterns: Patterns
) -> Iterator[Difference]:
    if len(expected) == len(actual) and all(
        _arg_matches(str(e), str(a), patterns) for e, a in zip(expected, actual, strict=True)
    ):
        return
    yield Difference(where, f"policy expects {_show(expected)}, request has {_show(actual)}")


def _arg_matches(expected: str, actual: str, patterns: Patterns) -> bool:
    expected = expected.replace("$$", "$")
    if expected == actual:
        return True
    return "$(" in expected and patterns.matches(expected, actual)


def _env(
    where: str, expected: list[Any], actual: list[Any], patterns: Patterns, env_regex: Sequence[Any]
) -> Iterator[Difference]:
    for variable in actual:
        text = str(variable)
        if any(patterns.matches(str(e), text) for e in expected):
            continue
        if any(patterns.search(str(regex), text) for regex in env_regex):
            continue
        name = text.split("=", 1)[0]
        same_name = [str(e) for e in expected if str(e).split("=", 1)[0] == name]
        hint = f"; policy has {_show(same_name[0])}" if same_name else ""
        yield Difference(where, f"{_show(text)} is not allowed by the policy{hint}")


def _capabilities(
    where: str, expected: Any, actual: Any, patterns: Patterns
) -> Iterator[Difference]:
    if not isinstance(expected, Mapping):
        return
    if not isinstance(actual, Mapping):
        yield Difference(where, "policy expects capabilities, request has null")
        return
    for key in ("Ambient", "Bounding", "Effective", "Inheritable", "Permitted"):
        want, have = (
            patterns.capabilities(_list(expected.get(key))),
            patterns.capabilities(_list(actual.get(key))),
        )
        if want != have:
            parts = []
            if have - want:
                parts.append("request adds " + ", ".join(sorted(have - want)))
            if want - have:
                parts.append("request lacks " + ", ".join(sorted(want - have)))
            yield Difference(f"{where}.{key}", "; ".join(parts))


def _mount_text(mount: Mapping[str, Any]) -> str:
    options = _show(mount.get("options", []))
    return f"{mount.get('type_', '')} {mount.get('source', '')} options {options}"


def _mounts(expected: list[Any], actual: list[Any], patterns: Patterns) -> Iterator[Difference]:
    by_destination: dict[str, list[Mapping[str, Any]]] = {}
    for mount in expected:
        if isinstance(mount, Mapping):
            by_destination.setdefault(str(mount.get("destination")), []).append(mount)
    seen = set()
    for mount in actual:
        if not isinstance(mount, Mapping):
            continue
        destination = str(mount.get("destination"))
        seen.add(destination)
        where = f"OCI.Mounts[{destination}]"
        options = by_destination.get(destination)
        if not options:
            yield Difference(
                where, f"unexpected mount ({_mount_text(mount)}); the policy has none there"
            )
            continue
        if any(_mount_matches(p, mount, patterns) for p in options):
            continue
        policy = options[0]
        for key in ("type_", "options"):
            yield from _equal(f"{where}.{key}", policy.get(key), mount.get(key))
        source = str(policy.get("source", ""))
        if not patterns.matches(source, str(mount.get("source", ""))):
            yield Difference(
                f"{where}.source",
                f"policy expects {_show(source)}, request has {_show(mount.get('source'))}",
            )
    unused = [destination for destination in by_destination if destination not in seen]
    if unused:
        yield Difference(
            "OCI.Mounts", f"the request lacks policy mounts {_show(unused)}", soft=True
        )


def _mount_matches(policy: Mapping[str, Any], mount: Mapping[str, Any], patterns: Patterns) -> bool:
    return (
        policy.get("type_") == mount.get("type_")
        and policy.get("options") == mount.get("options")
        and patterns.matches(str(policy.get("source", "")), str(mount.get("source", "")))
    )


def _storage_matches(
    policy: Mapping[str, Any], storage: Mapping[str, Any], patterns: Patterns
) -> bool:
    for key in ("driver", "driver_options", "fstype", "options", "fs_group", "shared"):
        if key in policy and policy[key] != storage.get(key):
            return False
    return all(
        patterns.matches(str(policy.get(key, "")), str(storage.get(key, "")))
        for key in ("source", "mount_point")
    )


def _storages(expected: list[Any], actual: list[Any], patterns: Patterns) -> Iterator[Difference]:
    # Guest-pull storages carry the image and are not in the policy (their source is not checked).
    relevant = [
        s for s in actual if isinstance(s, Mapping) and s.get("driver") != "image_guest_pull"
    ]
    if len(relevant) != len(expected):
        yield Difference(
            "storages",
            f"policy expects {len(expected)} (besides image pulls), request has {len(relevant)}",
        )
    for storage in relevant:
        if not any(
            isinstance(p, Mapping) and _storage_matches(p, storage, patterns) for p in expected
        ):
            yield Difference(
                f"storages[{storage.get('mount_point', '')}]",
                f"matches no policy storage (driver {_show(storage.get('driver'))},"
                f" fstype {_show(storage.get('fstype'))}, options {_show(storage.get('options'))})",
            )


def _devices(expected: list[Any], actual: list[Any], annotations: Any) -> Iterator[Difference]:
    if len(actual) > len(expected):
        yield Difference("devices", f"policy allows {len(expected)}, request has {len(actual)}")
    vfio = [d for d in expected if _dict(d).get("container_path", "").startswith(_VFIO_PATH)]
    if not vfio:
        return
    # Kata's rules tie VFIO devices to cdi.k8s.io/vfio<N> annotations: the numbers must agree
    # (hot plug), or there must be one annotation per policy device (cold plug).
    cdi = sorted(
        m.group(1) for key in _dict(annotations) if (m := _CDI_ANNOTATION.fullmatch(str(key)))
    )
    paths = [str(_dict(d).get("container_path", "")) for d in actual]
    numbers = sorted(path.removeprefix(_VFIO_PATH) for path in paths if path.startswith(_VFIO_PATH))
    if len(set(numbers)) != len(numbers):
        yield Difference("devices", f"a VFIO device appears twice: {_show(paths)}")
    elif numbers and numbers != cdi:
        yield Difference(
            "devices",
            f"VFIO devices {_show(numbers)} do not match the cdi.k8s.io/vfio<N> annotations"
            f" {_show(cdi)}",
        )
    elif not numbers and len(cdi) != len(vfio):
        yield Difference(
            "Annotations[cdi.k8s.io/vfio<N>]",
            f"policy expects {len(vfio)} (one per GPU), request has {len(cdi)}",
        )


def _linux(policy: Mapping[str, Any], request: Mapping[str, Any]) -> Iterator[Difference]:
    def types(namespaces: Any) -> set[str]:
        names = {str(n.get("Type")) for n in _list(namespaces) if isinstance(n, Mapping)}
        return {"mount" if n == "mnt" else n for n in names} - _IGNORED_NAMESPACES

    if "Namespaces" in policy and types(policy["Namespaces"]) != types(request.get("Namespaces")):
        yield Difference(
            "OCI.Linux.Namespaces",
            f"policy expects {_show(sorted(types(policy['Namespaces'])))},"
            f" request has {_show(sorted(types(request.get('Namespaces'))))}"
            " (network and cgroup aside)",
        )
    masked = _list(request.get("MaskedPaths"))
    missing = [p for p in _list(policy.get("MaskedPaths")) if p not in masked]
    if missing:
        yield Difference("OCI.Linux.MaskedPaths", f"request lacks {_show(missing)}")
    # A read-only path that the runtime masks instead is at least as safe.
    readonly = _list(request.get("ReadonlyPaths")) + masked
    missing = [p for p in _list(policy.get("ReadonlyPaths")) if p not in readonly]
    if missing:
        yield Difference("OCI.Linux.ReadonlyPaths", f"request lacks {_show(missing)}")
    p_sysctl = _dict(policy.get("Sysctl"))
    for name, value in _dict(request.get("Sysctl")).items():
        if p_sysctl.get(name) != value:
            expected = (
                f"policy has {_show(p_sysctl[name])}" if name in p_sysctl else "not in the policy"
            )
            yield Difference(
                f"OCI.Linux.Sysctl[{name}]", f"request sets {_show(value)}, {expected}"
            )


# --- ExecProcessRequest -------------------------------------------------------------------------


def _exec_process(
    data: Mapping[str, Any], request: Mapping[str, Any], state: Mapping[str, Any]
) -> tuple[str, list[Difference]]:
    differences = []
    if request.get("string_user") is not None:
        differences.append(Difference("string_user", "the policy requires null"))
    process = _dict(request.get("process"))
    for key in ("SelinuxLabel", "ApparmorProfile"):
        if process.get(key):
            differences.append(Difference(f"process.{key}", "the policy requires it empty"))
    if process.get("Capabilities") is not None:
        differences.append(
            Difference(
                "process.Capabilities", "the policy requires null (even empty lists are denied)"
            )
        )
    container_id = str(request.get("container_id", ""))
    index = state.get(container_id)
    containers = _list(data.get("containers"))
    if not isinstance(index, int) or not 0 <= index < len(containers):
        differences.append(
            Difference(
                "container_id",
                f"{_show(container_id)} was not created under this policy (no state entry)",
            )
        )
        return "", differences
    container = _dict(containers[index])
    defaults = _dict(_get(data, "request_defaults", "ExecProcessRequest"))
    args = [str(a) for a in _list(process.get("Args"))]
    commands = _list(container.get("exec_commands"))
    allowed = _list(defaults.get("allowed_commands"))
    if not (
        args in commands
        or args in allowed
        or " ".join(args) in allowed
        or any(re.search(str(r), " ".join(args)) for r in _list(defaults.get("regex")))
    ):
        differences.append(
            Difference(
                "process.Args",
                f"policy allows {_show(commands + allowed)}, request has {_show(args)}",
            )
        )
    patterns = Patterns(
        _dict(data.get("common")), _get(container, "OCI", "Annotations", _SANDBOX_NAME)
    )
    env_regex = _list(_get(data, "request_defaults", "CreateContainerRequest", "allow_env_regex"))
    p_process = _dict(_get(container, "OCI", "Process"))
    without_caps = {k: v for k, v in p_process.items() if k != "Capabilities"}
    differences.extend(
        _process("process", without_caps, process, patterns, env_regex, check_args=False)
    )
    name = _get(container, "OCI", "Annotations", _CONTAINER_NAME)
    return f"policy container {index}" + (f" ({name})" if name else ""), differences


# --- CreateSandboxRequest, CopyFileRequest and the network requests -----------------------------


def _create_sandbox(
    data: Mapping[str, Any], request: Mapping[str, Any], _: Mapping[str, Any]
) -> tuple[str, list[Difference]]:
    differences = list(_equal("sandbox_pidns", False, request.get("sandbox_pidns")))
    for key in ("kernel_modules", "guest_hook_path"):
        if request.get(key):
            differences.append(
                Difference(key, f"the policy requires it empty, request has {_show(request[key])}")
            )
    allowed = _list(_get(data, "sandbox", "storages"))
    for storage in _list(request.get("storages")):
        if storage not in allowed:
            differences.append(
                Difference(
                    f"storages[{_dict(storage).get('mount_point', '')}]",
                    "is not one of policy_data.sandbox.storages (compared whole):"
                    f" {_show(storage)}",
                )
            )
    return "policy_data.sandbox", differences


def _copy_file(
    data: Mapping[str, Any], request: Mapping[str, Any], _: Mapping[str, Any]
) -> tuple[str, list[Difference]]:
    differences = []
    path = str(request.get("path", ""))
    # For CopyFile, Kata's rules narrow $(bundle-id) to a full container id.
    patterns = Patterns(_dict(data.get("common")), fixed={"bundle-id": "[a-z0-9]{64}"})
    prefixes = [
        patterns.expand(str(p)) for p in _list(_get(data, "request_defaults", "CopyFileRequest"))
    ]
    matching = [p for p in prefixes if _search(p, path)]
    if not matching:
        differences.append(
            Difference("path", f"matches none of the allowed prefixes {_show(prefixes)}")
        )
    if ".." in path.split("/"):
        differences.append(Difference("path", "contains a '..' component"))
    file_type = request.get("file_type")
    if file_type not in ("Regular", "Directory", "Symlink"):
        differences.append(
            Difference("file_type", f"{_show(file_type)} is not Regular, Directory or Symlink")
        )
    if file_type == "Symlink":
        target = str(request.get("symlink_target") or "")
        if target.startswith("/") or ".." in target.split("/"):
            differences.append(
                Difference("symlink_target", f"{_show(target)} must be relative without '..'")
            )
        if matching and not any(_search(p + "[^/]+/", path) for p in matching):
            differences.append(
                Difference("path", "a symlink must be below the top level of the shared directory")
            )
    return "policy_data.request_defaults.CopyFileRequest", differences


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


def _request_default(kind: str, data: Mapping[str, Any]) -> Iterator[Difference]:
    defaults = _get(data, "request_defaults", kind)
    if defaults is False:
        yield Difference(
            f"request_defaults.{kind}", "is false: the policy does not allow this request"
        )


def _network(
    kind: str,
) -> Callable[
    [Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], tuple[str, list[Difference]]
]:
    def compare(
        data: Mapping[str, Any], request: Mapping[str, Any], _: Mapping[str, Any]
    ) -> tuple[str, list[Difference]]:
        defaults = _dict(_get(data, "request_defaults", kind))
        return f"policy_data.request_defaults.{kind}", list(_NETWORK[kind](defaults, request))

    return compare


def _routes(defaults: Mapping[str, Any], request: Mapping[str, Any]) -> Iterator[Difference]:
    for i, item in enumerate(_list(_get(request, "routes", "Routes"))):
        route = _dict(item)
        if route.get("device") in _list(defaults.get("forbidden_device_names")):
            yield Difference(
                f"routes.Routes[{i}].device", f"{_show(route.get('device'))} is forbidden"
            )
        for regex in _list(defaults.get("forbidden_source_regex")):
            if _search(str(regex), str(route.get("source", ""))):
                yield Difference(
                    f"routes.Routes[{i}].source",
                    f"{_show(route.get('source'))} matches forbidden {_show(regex)}",
                )


def _interface(defaults: Mapping[str, Any], request: Mapping[str, Any]) -> Iterator[Difference]:
    interface = _dict(request.get("interface"))
    if interface.get("name") in _list(defaults.get("forbidden_names")):
        yield Difference("interface.name", f"{_show(interface.get('name'))} is forbidden")
    if interface.get("hwAddr") in _list(defaults.get("forbidden_hw_addrs")):
        yield Difference("interface.hwAddr", f"{_show(interface.get('hwAddr'))} is forbidden")
    allowed = defaults.get("allow_raw_flags")
    flags = interface.get("raw_flags", 0)
    if isinstance(allowed, int) and isinstance(flags, int) and flags & ~allowed:
        yield Difference("interface.raw_flags", f"{flags} has bits outside the allowed {allowed}")


def _neighbors(defaults: Mapping[str, Any], request: Mapping[str, Any]) -> Iterator[Difference]:
    for i, item in enumerate(_list(_get(request, "neighbors", "ARPNeighbors"))):
        neighbor, where = _dict(item), f"neighbors.ARPNeighbors[{i}]"
        address = _dict(neighbor.get("toIPAddress"))
        if neighbor.get("device") in _list(defaults.get("forbidden_device_names")):
            yield Difference(f"{where}.device", f"{_show(neighbor.get('device'))} is forbidden")
        for regex in _list(defaults.get("forbidden_cidrs_regex")):
            if _search(str(regex), str(address.get("address", ""))):
                yield Difference(
                    f"{where}.toIPAddress.address", f"{_show(address.get('address'))} is forbidden"
                )
        if address.get("mask"):
            yield Difference(f"{where}.toIPAddress.mask", "must be empty")
        states = _list(defaults.get("allowed_states"))
        if states and neighbor.get("state") not in states:
            yield Difference(
                f"{where}.state", f"{neighbor.get('state')} is not one of {_show(states)}"
            )
        flags = neighbor.get("flags", 0)
        if isinstance(flags, int) and flags & ~136:
            yield Difference(
                f"{where}.flags", f"{flags} has bits outside NTF_PROXY|NTF_ROUTER (136)"
            )


_NETWORK: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], Iterator[Difference]]] = {
    "UpdateRoutesRequest": _routes,
    "UpdateInterfaceRequest": _interface,
    "AddARPNeighborsRequest": _neighbors,
}
_COMPARISONS: dict[
    str,
    Callable[
        [Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], tuple[str, list[Difference]]
    ],
] = {
    "CreateContainerRequest": _create_container,
    "ExecProcessRequest": _exec_process,
    "CreateSandboxRequest": _create_sandbox,
    "CopyFileRequest": _copy_file,
    **{kind: _network(kind) for kind in _NETWORK},
}
