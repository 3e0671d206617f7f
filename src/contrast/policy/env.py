"""A container's environment as the agent will see it, with placeholders where only the node knows.

Order (genpolicy, research/policy.md §2): the image's Env (or containerd's default PATH), then
`TERM=xterm` for a tty, `HOSTNAME=$(host-name)`, then the YAML `envFrom` and `env`. A YAML variable
whose name is already set replaces that entry in place, as containerd's WithEnv does. Values the
node decides become placeholders the rules accept loosely (`$(node-name)`, `$(pod-ip)`, …).
`$(NAME)` references are expanded the kubelet's way: in env values from the variables defined
before, in args from all of them; `$$` stays, since the rules turn it into `$` when comparing.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contrast.policy.generation_errors import PolicyGenerationError

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# fieldRef paths → what the policy expects (placeholders the rules substitute or accept loosely)
FIELD_PLACEHOLDERS = {
    "metadata.name": "$(sandbox-name)",
    "metadata.uid": "$(pod-uid)",
    "spec.nodeName": "$(node-name)",
    "status.hostIP": "$(host-ip)",
    "status.hostIPs": "$(host-ip)",
    "status.podIP": "$(pod-ip)",
    "status.podIPs": "$(pod-ip)",
}
_LABEL_OR_ANNOTATION = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


@dataclass(frozen=True)
class ConfigSources:
    """ConfigMaps and Secrets env values may come from, by kind and name (data decoded)."""

    maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    secrets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def from_resources(cls, resources: Sequence[Any]) -> ConfigSources:
        maps: dict[str, dict[str, str]] = {}
        secrets: dict[str, dict[str, str]] = {}
        for resource in resources:
            if not isinstance(resource, Mapping):
                continue
            kind = resource.get("kind")
            name = str((resource.get("metadata") or {}).get("name") or "")
            if kind == "ConfigMap":
                maps[name] = {str(k): str(v) for k, v in (resource.get("data") or {}).items()}
            elif kind == "Secret":
                secrets[name] = _secret_data(name, resource)
            elif kind == "List":
                nested = cls.from_resources(resource.get("items") or [])
                maps.update({k: dict(v) for k, v in nested.maps.items()})
                secrets.update({k: dict(v) for k, v in nested.secrets.items()})
        return cls(maps, secrets)


def _secret_data(name: str, secret: Mapping[str, Any]) -> dict[str, str]:
    data = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            data[str(key)] = base64.b64decode(str(value), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise PolicyGenerationError(
                f"Secret {name}: data.{key} is not base64 of UTF-8 text"
            ) from None
    data.update({str(k): str(v) for k, v in (secret.get("stringData") or {}).items()})
    return data


def expand(text: str, variables: Mapping[str, str]) -> str:
    """Kubernetes' `$(NAME)` expansion, except that `$$` is kept for the rules to unescape."""
    out = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$$")
            i += 2
        elif text.startswith("$(", i) and (end := text.find(")", i + 2)) != -1:
            name = text[i + 2 : end]
            out.append(variables.get(name, text[i : end + 1]))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class EnvContext:
    """What env values are resolved against: the pod's metadata and the config resources."""

    sources: ConfigSources
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    service_account: str
    where: str


def _lookup(context: EnvContext, kind: str, name: str, key: str | None, optional: bool) -> Any:
    table = context.sources.maps if kind == "ConfigMap" else context.sources.secrets
    if name not in table:
        if optional:
            return None
        raise PolicyGenerationError(
            f"{context.where} uses {kind} {name!r}, which is not among the given resources",
            hint=f"add the {kind} to the resources (or pass the file that defines it)",
        )
    if key is None:
        return table[name]
    if key not in table[name]:
        if optional:
            return None
        raise PolicyGenerationError(f"{context.where}: {kind} {name!r} has no key {key!r}")
    return table[name][key]


def _field_value(context: EnvContext, path: str) -> str:
    if path in FIELD_PLACEHOLDERS:
        return FIELD_PLACEHOLDERS[path]
    if path == "metadata.namespace":
        return context.namespace or "$(sandbox-namespace)"
    if path == "spec.serviceAccountName":
        return context.service_account
    match = _LABEL_OR_ANNOTATION.match(path)
    if match:
        table = context.labels if match[1] == "labels" else context.annotations
        # An annotation the YAML lacks may be added by the cluster: accept any value then.
        return table.get(match[2], "$(todo-annotation)")
    raise PolicyGenerationError(f"{context.where}: fieldRef {path!r} is not supported")


def _value_from(context: EnvContext, source: Mapping[str, Any]) -> str | None:
    for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
        if key in source:
            ref = source[key] or {}
            value = _lookup(
                context,
                kind,
                str(ref.get("name", "")),
                str(ref.get("key", "")),
                bool(ref.get("optional")),
            )
            return None if value is None else str(value)
    if "fieldRef" in source:
        return _field_value(context, str((source["fieldRef"] or {}).get("fieldPath", "")))
    if "resourceFieldRef" in source:
        return "$(resource-field)"
    raise PolicyGenerationError(f"{context.where}: env valueFrom {sorted(source)} is not supported")


def _set(env: list[str], name: str, value: str) -> None:
    entry = f"{name}={value}"
    for index, existing in enumerate(env):
        if existing.split("=", 1)[0] == name:
            env[index] = entry
            return
    env.append(entry)


def container_env(
    container: Mapping[str, Any], image_env: Sequence[str], context: EnvContext, *, pause: bool
) -> tuple[list[str], dict[str, str]]:
    """The policy Env list, and the YAML variables (for expanding args)."""
    env = list(image_env) or [DEFAULT_PATH]
    if pause:
        return env, {}
    if container.get("tty"):
        env.append("TERM=xterm")
    env.append("HOSTNAME=$(host-name)")
    defined: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if key not in source:
                continue
            ref = source[key] or {}
            data = _lookup(context, kind, str(ref.get("name", "")), None, bool(ref.get("optional")))
            for data_key, value in sorted((data or {}).items()):
                defined[prefix + data_key] = value
                _set(env, prefix + data_key, value)
    for variable in container.get("env") or []:
        name = str(variable.get("name", ""))
        if "valueFrom" in variable and variable["valueFrom"] is not None:
            value = _value_from(context, variable["valueFrom"])
            if value is None:
                continue
        else:
            value = expand(str(variable.get("value") or ""), defined)
        defined[name] = value
        _set(env, name, value)
    return env, defined
