"""The installed versions of a few distributions, for cache keys, without `importlib.metadata`.

`generate`'s caches key their entries by the versions of the libraries whose code decides a
check (`kuberesource/schemacache.py`, `kuberesource/yamlmemo.py`). `importlib.metadata` finds
them, but importing it loads the `email` package to parse metadata files: 20 ms, a twentieth of
an unchanged re-run. The version is also in the name of the distribution's `.dist-info`
directory, which installers write as `{name}-{version}.dist-info` (the wheel and
recording-installed-packages specifications), with the name normalised; the first one on
`sys.path` is the one Python imports, as `importlib.metadata` finds it. A distribution not found
that way (an egg, an unusual path) is looked up with `importlib.metadata` after all.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

_SEPARATORS = re.compile(r"[-_.]+")
_SUFFIX = ".dist-info"


def _normalised(name: str) -> str:
    return _SEPARATORS.sub("_", name).lower()


def versions(names: Sequence[str]) -> list[str | None]:
    """The version of each distribution in `names`, None for one that is not installed."""
    wanted = [_normalised(name) for name in names]
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            listing = os.listdir(entry or ".")
        except OSError:
            continue
        for item in listing:
            if not item.endswith(_SUFFIX):
                continue
            name, _, version = item[: -len(_SUFFIX)].partition("-")
            if version and "-" not in version:
                found.setdefault(_normalised(name), version)
        if all(name in found for name in wanted):
            break
    missing = [original for original, name in zip(names, wanted, strict=True) if name not in found]
    if missing:
        found.update(_from_metadata(missing))
    return [found.get(name) for name in wanted]


def _from_metadata(names: list[str]) -> dict[str, str]:
    from importlib import metadata  # noqa: PLC0415 - only for what the directories did not say

    versions: dict[str, str] = {}
    for name in names:
        try:
            versions[_normalised(name)] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions
