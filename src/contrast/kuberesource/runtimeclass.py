"""Which platform each pod runs on, decided by its runtime class (research/contrast.md §6.2).

`contrast-cc` asks for "the platform given with `--reference-values`". A platform-specific
name wins over that flag: the placeholder `contrast-cc-<platform>` and the versioned name
`contrast-cc-<platform>-<hash>` of any release both become this release's runtime class for that
platform, so one set of resources can mix platforms (the multi-runtime guide), and re-running
`generate` after an upgrade moves pods to the new runtime. Pods with any other runtime class, or
none, are not confidential and are left alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from contrast.kuberesource.workloads import ResourceError, Workload
from contrast.platforms import PLATFORMS, RUNTIME_CLASS_PREFIX, Platform, from_runtime_class

# `kata-cc-isolation` is the name older releases of the original used for the same request.
GENERIC_RUNTIME_CLASSES = (RUNTIME_CLASS_PREFIX, "kata-cc-isolation")


class RuntimeClassError(ResourceError):
    """A runtime class that asks for Contrast but names no platform this release knows."""


@dataclass(frozen=True)
class PlatformChoice:
    """A workload and the platform it runs on; `platform` is None for a pod left alone."""

    workload: Workload
    platform: Platform | None

    @property
    def confidential(self) -> bool:
        return self.platform is not None


def _placeholders() -> str:
    return ", ".join(platform.placeholder for platform in PLATFORMS)


def platform_for(runtime_class: str, default: Platform | None, where: str = "") -> Platform | None:
    """The platform `runtime_class` runs on; `default` is the one given by the user, if any."""
    prefix = f"{where}: " if where else ""
    if runtime_class in GENERIC_RUNTIME_CLASSES:
        if default is None:
            raise RuntimeClassError(
                f"{prefix}runtime class {runtime_class!r} needs a platform, and none was given",
                hint="pass --reference-values PLATFORM, or write a platform's runtime class"
                f" ({_placeholders()})",
            )
        return default
    if not runtime_class.startswith(f"{RUNTIME_CLASS_PREFIX}-"):
        return None
    platform = from_runtime_class(runtime_class)
    if platform is None:
        raise RuntimeClassError(
            f"{prefix}runtime class {runtime_class!r} names no known platform",
            hint=f"use {RUNTIME_CLASS_PREFIX} or one of {_placeholders()}",
        )
    return platform


def resolve(workload: Workload, default: Platform | None) -> Platform | None:
    """The platform `workload` runs on, or None when it is not confidential; changes nothing."""
    return platform_for(workload.runtime_class_name, default, workload.describe())


def resolve_all(workloads: Iterable[Workload], default: Platform | None) -> list[PlatformChoice]:
    """The platform of every workload, in order; changes nothing."""
    return [PlatformChoice(workload, resolve(workload, default)) for workload in workloads]


def set_runtime_class(workload: Workload, platform: Platform, handler: str | None = None) -> bool:
    """Write `platform`'s runtime class (`handler`, default: this release's runtime of it);
    whether anything changed."""
    name = handler or platform.runtime_class_name
    if workload.runtime_class_name == name:
        return False
    workload.pod_spec["runtimeClassName"] = name
    return True


def used_platforms(choices: Iterable[PlatformChoice]) -> list[Platform]:
    """The platforms in use, in the order of `PLATFORMS` (for the manifest's reference values)."""
    used = {choice.platform for choice in choices if choice.platform is not None}
    return [platform for platform in PLATFORMS if platform in used]
