"""Policies for workloads: `policy_data` from a pod, its images and the settings, then initdata.

The policy text is genpolicy's: the rules, then `\\npolicy_data := ` and the data as serde_json's
pretty printer writes it (2-space indent, raw UTF-8, no trailing newline), with genpolicy's key
order (research/kata-agent-policy-inputs.md §4.1). The text goes into initdata as `policy.rego`;
the initdata's hash is what HOST_DATA / MRCONFIGID carry and what the manifest is keyed by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contrast.images.model import ImageFacts
from contrast.jsontext import dumps_indented
from contrast.kuberesource.workloads import Workload
from contrast.platforms import from_runtime_class
from contrast.policy.containers import PodFacts, container_policy
from contrast.policy.env import ConfigSources, EnvContext
from contrast.policy.generation_errors import PolicyGenerationError
from contrast.policy.initdata import PolicyEncoder
from contrast.policy.mounts import normalized_storage
from contrast.policy.sandbox import sandbox_name_regex
from contrast.policy.settings import ASSETS, Settings, default_settings, for_platform

COMMON_KEYS = (
    "cpath",
    "root_path",
    "sfprefix",
    "spath",
    "ipv4_a",
    "ip_p",
    "svc_name_downward_env",
    "dns_label",
    "default_caps",
    "privileged_caps",
)
REQUEST_DEFAULT_KEYS = (
    "CreateContainerRequest",
    "CopyFileRequest",
    "ExecProcessRequest",
    "UpdateRoutesRequest",
    "UpdateInterfaceRequest",
    "AddARPNeighborsRequest",
    "CloseStdinRequest",
    "ReadStreamRequest",
    "UpdateEphemeralMountsRequest",
    "WriteStreamRequest",
    "GetDiagnosticDataRequest",
)
CLUSTER_CONFIG_KEYS = ("pause_container_image", "guest_pull", "emptydir_type")
# Between the rules and the data in every policy text.
POLICY_DATA = "\npolicy_data := "


def default_rules() -> str:
    """Contrast's packaged rules.rego."""
    return (ASSETS / "rules.rego").read_text(encoding="utf-8")


__all__ = ["GeneratedPolicy", "PolicyGenerator", "default_rules", "default_settings"]


@dataclass(frozen=True)
class GeneratedPolicy:
    """A workload's policy and its wrappings.

    `policy_hash` is the hex of the 32 bytes HOST_DATA / MRCONFIGID[:32] carry (the manifest key).
    """

    policy_text: str
    initdata_toml: bytes
    annotation: str
    policy_hash: str
    policy_data: Mapping[str, Any]


def _ordered(source: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """`keys` first in that order (those present), then any other keys as they come."""
    ordered = {key: source[key] for key in keys if key in source}
    ordered.update({key: value for key, value in source.items() if key not in ordered})
    return ordered


def _containers(spec: Mapping[str, Any], where: str) -> tuple[list[Any], list[Any]]:
    init = spec.get("initContainers") or []
    regular = spec.get("containers") or []
    if not isinstance(init, list) or not isinstance(regular, list):
        raise PolicyGenerationError(f"{where}: containers must be lists")
    for container in [*init, *regular]:
        if not isinstance(container, Mapping) or not isinstance(container.get("image"), str):
            raise PolicyGenerationError(f"{where}: every container needs a name and an image")
    if not regular:
        raise PolicyGenerationError(f"{where} has no containers")
    return init, regular


def _with_claim_templates(workload: Workload) -> Mapping[str, Any]:
    """The pod spec as the StatefulSet controller creates it: a PVC volume per claim template.

    Kubernetes adds these volumes to each pod, so containers may mount them without the pod
    template listing them.
    """
    spec = workload.pod_spec
    templates = workload.resource.get("spec", {}).get("volumeClaimTemplates") or []
    if workload.kind != "StatefulSet" or not templates:
        return spec
    listed = {str(volume.get("name")) for volume in spec.get("volumes") or []}
    claims = [
        {"name": name, "persistentVolumeClaim": {"claimName": f"{name}-{workload.name}"}}
        for template in templates
        if (name := str((template.get("metadata") or {}).get("name", ""))) not in listed
    ]
    return {**spec, "volumes": [*(spec.get("volumes") or []), *claims]}


class PolicyGenerator:
    """Generates policies with one rule set and one settings document."""

    def __init__(
        self, rules: str, settings: Settings, initdata_extra: Mapping[str, str] | None = None
    ) -> None:
        self.rules = rules
        self.settings = settings
        # Initdata entries besides the policy (the insecure debug flag), in every pod's.
        self.initdata_extra = dict(initdata_extra or {})
        self._encoder: PolicyEncoder | None = None
        self._platform_settings: dict[str, Settings] = {}

    @property
    def encoder(self) -> PolicyEncoder:
        """Encodes this generator's policies, the shared rules once (made on first use)."""
        if self._encoder is None:
            self._encoder = PolicyEncoder(self.rules + POLICY_DATA, self.initdata_extra)
        return self._encoder

    def required_images(self, workload: Workload) -> set[str]:
        """The image strings whose facts `generate` needs: every container's and the pause image."""
        init, regular = _containers(workload.pod_spec, workload.describe())
        return {str(c["image"]) for c in [*init, *regular]} | {self.settings.pause_image}

    def policy_data(
        self,
        workload: Workload,
        images: Mapping[str, ImageFacts],
        config_resources: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        where = workload.describe()
        spec = _with_claim_templates(workload)
        init, regular = _containers(spec, where)
        metadata = workload.pod_template.get("metadata") or {}
        annotations = {str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()}
        labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
        pod = PodFacts(
            spec=spec,
            annotations=annotations,
            sandbox_name=sandbox_name_regex(workload),
            namespace=workload.namespace,
            env_context=EnvContext(
                sources=ConfigSources.from_resources(config_resources),
                namespace=workload.namespace,
                labels=labels,
                annotations=annotations,
                service_account=str(spec.get("serviceAccountName") or "default"),
                where=where,
            ),
            where=where,
        )
        settings = self.settings_for(workload)
        pause_image = settings.pause_image
        # Pause first; each init container is inserted at index 1 (so they end up reversed, as in
        # genpolicy: the state stores indices into this list); then the regular containers.
        ordered: list[tuple[Mapping[str, Any], bool]] = [({"image": pause_image}, True)]
        for container in init:
            ordered.insert(1, (container, False))
        ordered += [(container, False) for container in regular]
        containers = []
        for container, pause in ordered:
            reference = str(container["image"])
            facts = images.get(reference)
            if facts is None:
                raise PolicyGenerationError(
                    f"{where}: no image facts for {reference}",
                    hint="resolve every image of required_images() before generating",
                )
            containers.append(container_policy(settings, pod, container, facts, pause=pause))
        return self._assemble(containers, settings)

    def settings_for(self, workload: Workload) -> Settings:
        """The settings for the platform `workload`'s runtime class names (`for_platform`).

        The runtime class is part of the pod, so the policy cache's key covers the choice.
        """
        platform = from_runtime_class(workload.runtime_class_name)
        name = "" if platform is None else platform.name
        if name not in self._platform_settings:
            self._platform_settings[name] = for_platform(self.settings, name)
        return self._platform_settings[name]

    def _assemble(self, containers: list[dict[str, Any]], settings: Settings) -> dict[str, Any]:
        common = settings.section("common")
        cluster = settings.section("cluster_config")
        vfio = settings.get("devices", "vfio", default={}) or {}
        return {
            "containers": containers,
            "common": {key: common[key] for key in COMMON_KEYS if key in common},
            "sandbox": {
                "storages": [
                    normalized_storage(s) for s in settings.get("sandbox", "storages", default=[])
                ]
            },
            "request_defaults": _ordered(
                settings.section("request_defaults"), REQUEST_DEFAULT_KEYS
            ),
            "devices": {"vfio": {"device_path": vfio.get("device_path", ""), "nvidia": {}}},
            "cluster_config": {
                **{key: cluster[key] for key in CLUSTER_CONFIG_KEYS if key in cluster},
                "cgroup_mount_extras_allowed": cluster.get("cgroup_mount_extras_allowed", []),
            },
        }

    def generate(
        self,
        workload: Workload,
        images: Mapping[str, ImageFacts],
        config_resources: Sequence[Mapping[str, Any]] = (),
    ) -> GeneratedPolicy:
        data = self.policy_data(workload, images, config_resources)
        text = self.rules + POLICY_DATA + dumps_indented(data, indent=2)
        encoded = self.encoder.encode(text)
        return GeneratedPolicy(
            policy_text=text,
            initdata_toml=encoded.toml,
            annotation=encoded.annotation,
            policy_hash=encoded.policy_hash.hex(),
            policy_data=data,
        )
