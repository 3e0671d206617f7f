"""Adding the runtime handler to containerd's `config.toml`, keeping everything else as it was.

containerd finds runtimes under the CRI plugin's `containerd.runtimes.<handler>` table: plugin
`io.containerd.grpc.v1.cri` in config version 2 (containerd 1.x), `io.containerd.cri.v1.runtime`
in version 3 (containerd 2.x) (research/contrast.md §8). The handler's table is appended to the end
of the file as one block, so every byte the node's owner wrote (comments, order, other runtimes,
registry mirrors, snapshotters) stays where it was. A table of the same handler with other content
(an earlier install with another Kata config path) is removed first with tomlkit, which keeps the
rest of the text intact. The result is parsed again and must equal the old config plus exactly
the new table, else nothing is written.

containerd replaces, not merges, its built-in runtime list when a config names any runtime (checked
with containerd 1.6: a config naming only our runtime loses `runc`, while `default_runtime_name`
still says `runc`, and CRI would fail). So when the default runtime `runc` is not in the config,
the block restates containerd's built-in entry for it before our table.

A config nested more deeply than `tomldepth.MAX_DEPTH` levels is refused before it is parsed.

A missing file becomes a minimal version 2 config holding only these tables: containerd 1.x, the
most common version on the nodes this targets, fills in its defaults, and containerd 2.x still
reads version 2 (it migrates it in memory). Version 1 configs (no `version` key) are refused:
their plugin names differ, and `containerd config migrate` converts them.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from contrast.nodeinstaller import tomldepth
from contrast.nodeinstaller.errors import ContainerdConfigError

CRI_PLUGINS: Mapping[int, str] = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
NEW_CONFIG_VERSION = 2
RUNTIME_TYPE = "io.containerd.contrast-cc.v2"
RUNC_RUNTIME_TYPE = "io.containerd.runc.v2"
DEFAULT_RUNTIME = "runc"
DEFAULT_RUNTIME_TABLE: Mapping[str, Any] = {"runtime_type": RUNC_RUNTIME_TYPE}
KATA_ANNOTATIONS = "io.katacontainers.*"
CDI_ANNOTATIONS = "cdi.k8s.io/*"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class ContainerdRuntime:
    """The runtime entry containerd needs: handler name, shim and Kata configuration."""

    handler: str
    shim_path: str
    kata_config_path: str
    gpu: bool = False

    @property
    def pod_annotations(self) -> list[str]:
        # GPU pods carry their device requests as CDI annotations the shim must see.
        return [KATA_ANNOTATIONS, CDI_ANNOTATIONS] if self.gpu else [KATA_ANNOTATIONS]

    def table(self) -> dict[str, Any]:
        """The handler's table as parsed TOML (what the config must contain afterwards)."""
        return {
            "runtime_type": RUNTIME_TYPE,
            "runtime_path": self.shim_path,
            "pod_annotations": self.pod_annotations,
            "privileged_without_host_devices": True,
            "options": {"ConfigPath": self.kata_config_path},
        }


@dataclass(frozen=True)
class RuncWrapperRuntime:
    """containerd's own runc shim running another program as runc: the emulated runtime.

    `options.BinaryName` is the shim's runc; `pod_annotations` makes CRI copy the pod's
    `io.katacontainers.*` annotations (its initdata) into the specs of the sandbox and of each
    container, as it does for Kata; host devices are not given to privileged pods, as with Kata.
    """

    handler: str
    binary_name: str

    @property
    def pod_annotations(self) -> list[str]:
        return [KATA_ANNOTATIONS]

    def table(self) -> dict[str, Any]:
        return {
            "runtime_type": RUNC_RUNTIME_TYPE,
            "pod_annotations": self.pod_annotations,
            "privileged_without_host_devices": True,
            "options": {"BinaryName": self.binary_name},
        }


AnyRuntime = ContainerdRuntime | RuncWrapperRuntime


@dataclass(frozen=True)
class PatchedConfig:
    """The config text after patching; `changed` is False when the input already had the table."""

    text: str
    version: int
    changed: bool


def containerd_table_path(version: int) -> tuple[str, ...]:
    """The CRI plugin's `containerd` table, which holds the runtimes and the default's name."""
    return ("plugins", CRI_PLUGINS[version], "containerd")


def runtime_table_path(version: int, handler: str) -> tuple[str, ...]:
    return (*containerd_table_path(version), "runtimes", handler)


def patch_containerd_config(
    text: str | None, runtime: AnyRuntime, *, source: str = "containerd config"
) -> PatchedConfig:
    """`text` (None: no file yet) with `runtime`'s table added or replaced; pure, writes nothing.

    `source` names the file in error messages.
    """
    if text is None:
        base = f"version = {NEW_CONFIG_VERSION}\n"
        return _append(base, _parse(base, source), NEW_CONFIG_VERSION, runtime)
    parsed = _parse(text, source)
    if not parsed:
        # Empty or comments only: containerd would read version 1; declare version 2 instead.
        base = _with_final_newline(text) + f"version = {NEW_CONFIG_VERSION}\n"
        return _append(base, _parse(base, source), NEW_CONFIG_VERSION, runtime)
    version = _version(parsed)
    path = runtime_table_path(version, runtime.handler)
    existing = _lookup(parsed, path)
    if existing == runtime.table():
        return PatchedConfig(text, version, changed=False)
    base = text if existing is None else _remove_table(text, path)
    return _append(base, parsed, version, runtime)


DEFAULT_GRPC_ADDRESS = "/run/containerd/containerd.sock"


def grpc_address(text: str) -> str:
    """The socket containerd listens on with config `text` ([grpc] address, else its default)."""
    address = _parse(text, "containerd config").get("grpc", {}).get("address")
    return address if isinstance(address, str) and address else DEFAULT_GRPC_ADDRESS


def _parse(text: str, source: str) -> dict[str, Any]:
    try:
        return tomldepth.loads(text)
    except tomldepth.TomlTooDeep as error:
        raise ContainerdConfigError(
            f"{source} is {error}",
            hint="containerd's own settings nest six levels; fix the file",
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise ContainerdConfigError(
            f"{source} is not valid TOML: {error}",
            hint="fix the file; containerd itself would refuse it",
        ) from error


def _version(parsed: Mapping[str, Any]) -> int:
    version = parsed.get("version")
    if version is None:
        raise ContainerdConfigError(
            "containerd config has no `version` key, so it is version 1, which is not supported",
            hint="convert it with `containerd config migrate` (containerd 2.x) or add"
            " `version = 2` and rename the plugin sections",
        )
    if isinstance(version, bool) or version not in CRI_PLUGINS:
        raise ContainerdConfigError(
            f"containerd config version {version!r} is not supported",
            hint="versions 2 (containerd 1.x) and 3 (containerd 2.x) are",
        )
    return int(version)


def _lookup(parsed: Mapping[str, Any], path: Sequence[str]) -> Any:
    node: Any = parsed
    for depth, key in enumerate(path):
        if not isinstance(node, Mapping):
            where = ".".join(path[:depth])
            raise ContainerdConfigError(
                f"containerd config has a value, not a table, at {where}",
                hint="containerd would not find any runtime there either; fix the file",
            )
        if key not in node:
            return None
        node = node[key]
    return node


def _without(parsed: Mapping[str, Any], path: Sequence[str]) -> dict[str, Any]:
    """A deep copy of `parsed` without the table at `path`, pruning tables left empty by it."""
    copy = json.loads(json.dumps(parsed, default=str))
    node = copy
    parents = []
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            return dict(copy)
        parents.append((node, key))
        node = node[key]
    node.pop(path[-1], None)
    for parent, key in reversed(parents):
        if parent[key]:
            break
        del parent[key]
    return dict(copy)


def _remove_table(text: str, path: Sequence[str]) -> str:
    try:
        document = tomlkit.parse(text)
        node: Any = document
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        return tomlkit.dumps(document)
    except (TOMLKitError, KeyError, TypeError) as error:
        raise ContainerdConfigError(
            f"cannot replace the existing table {'.'.join(path)}: {error}",
            hint="remove that runtime's table from the containerd config by hand and run again",
        ) from error


def _key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name)


def _header(path: Sequence[str]) -> str:
    return "[" + ".".join(_key(key) for key in path) + "]"


def _assignment(key: str, value: Any) -> str:
    return f"{_key(key)} = {tomlkit.item(value).as_string()}"


def _table_lines(path: Sequence[str], table: Mapping[str, Any], comment: str) -> list[str]:
    values = {key: value for key, value in table.items() if not isinstance(value, Mapping)}
    lines = [_header(path), f"# {comment}"]
    lines += [_assignment(key, value) for key, value in values.items()]
    for key, value in table.items():
        if isinstance(value, Mapping):
            lines += ["", _header((*path, key))]
            lines += [_assignment(inner, item) for inner, item in value.items()]
    return lines


def render_runtime_block(
    version: int, runtime: AnyRuntime, *, restate_default: bool = False
) -> str:
    """The TOML block appended to the config: the handler's table, maybe `runc`'s before it."""
    lines = []
    if restate_default:
        lines += _table_lines(
            runtime_table_path(version, DEFAULT_RUNTIME),
            DEFAULT_RUNTIME_TABLE,
            "containerd's built-in default runtime, restated by the Contrast node installer:"
            " a config that names any runtime replaces the built-in list.",
        )
        lines.append("")
    lines += _table_lines(
        runtime_table_path(version, runtime.handler),
        runtime.table(),
        "Added by the Contrast node installer; rewritten whenever the runtime is installed.",
    )
    return "\n".join(lines) + "\n"


def _needs_default(parsed: Mapping[str, Any], version: int) -> bool:
    containerd = _lookup(parsed, containerd_table_path(version)) or {}
    default = containerd.get("default_runtime_name", DEFAULT_RUNTIME)
    return (
        default == DEFAULT_RUNTIME
        and _lookup(parsed, runtime_table_path(version, DEFAULT_RUNTIME)) is None
    )


def _with_final_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else f"{text}\n"


def _append(
    base: str, before: Mapping[str, Any], version: int, runtime: AnyRuntime
) -> PatchedConfig:
    base = _with_final_newline(base)
    separator = "\n" if base and not base.endswith("\n\n") else ""
    restate_default = _needs_default(before, version)
    text = (
        base + separator + render_runtime_block(version, runtime, restate_default=restate_default)
    )
    added = {runtime_table_path(version, runtime.handler): runtime.table()}
    if restate_default:
        added[runtime_table_path(version, DEFAULT_RUNTIME)] = dict(DEFAULT_RUNTIME_TABLE)
    try:
        after = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        where = ".".join(runtime_table_path(version, runtime.handler)[:-1])
        raise ContainerdConfigError(
            f"the runtime's table cannot be appended to this containerd config: {error}",
            hint=f"define {where} as a [table], not inline, and run again",
        ) from error
    present = all(_lookup(after, path) == table for path, table in added.items())
    rest_before, rest_after = dict(before), after
    for path in added:
        rest_before, rest_after = _without(rest_before, path), _without(rest_after, path)
    if not present or rest_after != rest_before:
        raise ContainerdConfigError(
            "adding the runtime's table would change other parts of the containerd config",
            hint="this is a bug in the node installer; the config was left as it was",
        )
    return PatchedConfig(text, version, changed=True)
