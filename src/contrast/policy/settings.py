"""genpolicy settings: the templates and defaults `policy_data` is generated from.

The layout is Kata's `genpolicy-settings.json` (research/kata-agent-policy-inputs.md §4.2), so a
user can take settings written for genpolicy and the other way round. A settings *directory* holds
`settings.json` plus `settings.d/*.json`, RFC 6902 patches applied in file-name order, as
genpolicy's `-j DIR` does with `genpolicy-settings.json` and `genpolicy-settings.d/` (those names
are accepted too). Settings are kept as the parsed document: the generator copies most parts into
`policy_data` verbatim, and unknown keys must survive for rules a user adapts.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from contrast.boundedfile import read_bounded
from contrast.policy.errors import PolicyError
from contrast.policy.json_patch import JsonPatchError, apply_patch

ASSETS = Path(__file__).parent / "assets"
# A settings file or drop-in is read whole (`contrast.boundedfile`): Kata's is about 10 KiB.
MAX_BYTES = 16 << 20
SETTINGS_NAMES = (
    ("settings.json", "settings.d"),
    ("genpolicy-settings.json", "genpolicy-settings.d"),
)
# The parts of the settings the generator reads; a missing one is a broken settings file.
REQUIRED_SECTIONS = (
    "pause_container",
    "other_container",
    "volumes",
    "devices",
    "mount_destinations",
    "sandbox",
    "common",
    "kata_config",
    "cluster_config",
    "request_defaults",
)


class SettingsError(PolicyError):
    """Settings that cannot be read or do not have the expected layout."""


def _checked(document: Any, source: str) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise SettingsError(f"{source}: the settings are not a JSON object")
    missing = [
        name for name in REQUIRED_SECTIONS if not isinstance(document.get(name), dict | list)
    ]
    if missing:
        raise SettingsError(
            f"{source}: settings lack {', '.join(missing)}",
            hint="start from the settings.json `contrast generate` writes and adapt it",
        )
    problem = _shape_problem(document, _default_document(), "")
    if problem is not None:
        raise SettingsError(
            f"{source}: {problem}",
            hint="keep the shape of the settings.json `contrast generate` writes",
        )
    return document


@functools.cache
def _default_document() -> Any:
    return json.loads(default_settings_text())


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else "null"


def _shape_problem(value: Any, default: Any, path: str) -> str | None:
    """Where `value` departs from the JSON type the defaults have at `path`, if anywhere.

    The generator reads settings expecting the defaults' shape, so a list where the defaults
    have an object would otherwise fail deep inside it. Keys the defaults lack, and values the
    defaults leave null, are not checked; list elements are compared with the first default.
    """
    if default is None:
        return None
    if _kind(value) != _kind(default):
        return f"{path or 'the settings'} is {_kind(value)}, not {_kind(default)}"
    if isinstance(default, dict):
        for key, item in value.items():
            if key in default:
                problem = _shape_problem(item, default[key], f"{path}.{key}".lstrip("."))
                if problem is not None:
                    return problem
    elif isinstance(default, list) and default:
        for index, item in enumerate(value):
            problem = _shape_problem(item, default[0], f"{path}[{index}]")
            if problem is not None:
                return problem
    return None


_SCALARS = (str, int, float, bool, type(None))


def _copy(value: Any) -> Any:
    """A deep copy of JSON data, twice as fast as `copy.deepcopy`.

    JSON has no shared references for deepcopy's memo to keep, and its scalars are immutable;
    anything else is left to `copy.deepcopy`. A policy reads settings some 20 times per workload.
    """
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    if isinstance(value, _SCALARS):
        return value
    return copy.deepcopy(value)


@dataclass(frozen=True)
class Settings:
    """A settings document. `document` is private to this object: accessors return copies."""

    document: Mapping[str, Any] = field(repr=False)
    source: str = "settings"
    # Each part handed out so far as JSON text (None: not JSON data), see `_copy_of`.
    _texts: dict[tuple[str, ...], bytes | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_text(cls, text: str | bytes, source: str = "settings") -> Settings:
        try:
            document = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise SettingsError(f"{source} is not JSON: {error}") from None
        return cls(_checked(document, source), source)

    def section(self, name: str) -> Any:
        """A deep copy of one top-level part (callers may modify what they get)."""
        if name not in self.document:
            raise SettingsError(f"{self.source}: settings lack {name}")
        return self._copy_of((name,), self.document[name])

    def get(self, *keys: str, default: Any = None) -> Any:
        node: Any = self.document
        for key in keys:
            if not isinstance(node, Mapping) or key not in node:
                return _copy(default)
            node = node[key]
        return self._copy_of(keys, node)

    def _copy_of(self, keys: tuple[str, ...], value: Any) -> Any:
        """A deep copy of the part at `keys`, made by parsing its JSON text with orjson.

        A policy reads some 30 parts per workload: orjson parses them in a fifth of the time
        `_copy` takes, and in half of json's. The text is made once per part and kept only if it
        reads back as an equal value (JSON data: no tuples, no keys but strings, no NaN, integers
        within 64 bits; orjson keeps int, float and bool apart), so the copy equals the part in
        value and in type.
        """
        if not isinstance(value, dict | list):
            return _copy(value)
        if keys not in self._texts:
            try:
                text: bytes | None = orjson.dumps(value)
            except orjson.JSONEncodeError:
                text = None
            if text is not None and orjson.loads(text) != value:
                text = None
            self._texts[keys] = text
        text = self._texts[keys]
        return _copy(value) if text is None else orjson.loads(text)

    @property
    def pause_image(self) -> str:
        image = self.get("cluster_config", "pause_container_image")
        if not isinstance(image, str) or not image:
            raise SettingsError(f"{self.source}: cluster_config.pause_container_image is not set")
        return image

    @property
    def guest_pull(self) -> bool:
        return bool(self.get("cluster_config", "guest_pull", default=False))

    def to_text(self) -> str:
        return json.dumps(self.document, indent=4, ensure_ascii=False) + "\n"


def default_settings_text() -> str:
    """Contrast's default settings (Kata's, with the changes listed in assets/NOTICE)."""
    return (ASSETS / "settings.json").read_text(encoding="utf-8")


def default_settings() -> Settings:
    return Settings.from_text(default_settings_text(), "default settings")


# The drop-ins each platform's settings get, as Kata's 20-oci-* examples for a containerd version:
# the emulated platforms run on the node's own containerd, Debian's 1.6.20, which writes ociVersion
# 1.0.2-dev into every spec (Kata's default expects 1.1.0) and mounts a sandbox's
# /etc/resolv.conf `rbind,ro` (1.7 added nosuid, nodev and noexec, which Kata's default expects).
# Real platforms keep the settings as they are. A drop-in changes only the default: what the user
# set stays.
_CONTAINERD_1_6 = ("20-oci-1.0.2-dev-drop-in.json", "30-containerd-1.6-resolv-conf-drop-in.json")
PLATFORM_DROP_INS: dict[str, tuple[str, ...]] = {
    "emulated-snp": _CONTAINERD_1_6,
    "emulated-tdx": _CONTAINERD_1_6,
}


def for_platform(settings: Settings, platform: str) -> Settings:
    """`settings` with `platform`'s drop-ins applied (the same settings for most platforms).

    A drop-in whose `test` no longer holds (the user changed what it replaces) is left out.
    """
    document, source = settings.document, settings.source
    for name in PLATFORM_DROP_INS.get(platform, ()):
        patch = json.loads((ASSETS / name).read_text(encoding="utf-8"))
        try:
            document = apply_patch(document, patch)
        except JsonPatchError:
            continue
        source = f"{source} + {name}"
    if source == settings.source:
        return settings
    return Settings(_checked(document, source), source)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(
            read_bounded(
                path, MAX_BYTES, what="the settings file", hint="pass a genpolicy settings file"
            )
        )
    except OSError as error:
        raise SettingsError(f"cannot read {path}: {error.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SettingsError(f"{path} is not JSON: {error}") from None


def load_settings(path: str | Path) -> Settings:
    """Settings from a file, or from a directory with a base file and its drop-ins."""
    path = Path(path)
    if not path.is_dir():
        return Settings(_checked(_read_json(path), str(path)), str(path))
    for base_name, drop_in_name in SETTINGS_NAMES:
        base = path / base_name
        if base.is_file():
            drop_in_dir = drop_in_name
            break
    else:
        raise SettingsError(
            f"{path} holds neither settings.json nor genpolicy-settings.json",
            hint="a settings directory needs settings.json and optionally settings.d/*.json",
        )
    document = _read_json(base)
    drop_ins = sorted((path / drop_in_dir).glob("*.json")) if (path / drop_in_dir).is_dir() else []
    for drop_in in drop_ins:
        try:
            document = apply_patch(document, _read_json(drop_in))
        except JsonPatchError as error:
            raise SettingsError(
                f"settings drop-in {drop_in} does not apply: {error}",
                hint="drop-ins are RFC 6902 patches applied in file-name order",
            ) from None
    source = f"{base} + {len(drop_ins)} drop-in(s)" if drop_ins else str(base)
    return Settings(_checked(document, source), source)
