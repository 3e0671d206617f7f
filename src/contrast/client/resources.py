"""Finding the policies (initdata) of the workloads in a directory of Kubernetes YAML.

`contrast set` sends the policy documents with the manifest and checks that the two agree, so
that what the cluster will run is exactly what the manifest admits.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ruamel.yaml.error import YAMLError

from contrast.boundedfile import read_bounded
from contrast.errors import ContrastError
from contrast.kuberesource import yamlbounds
from contrast.policy.initdata import ANNOTATION, decode_annotation, policy_hash

YAML_SUFFIXES = {".yml", ".yaml"}


class ResourceError(ContrastError):
    """A YAML file that cannot be read."""


def yaml_files(directory: Path) -> list[Path]:
    return sorted(
        path for path in directory.rglob("*") if path.suffix in YAML_SUFFIXES and path.is_file()
    )


def _annotation_values(node: Any) -> Iterator[str]:
    """Every initdata annotation value anywhere in a document (pods, templates, lists)."""
    if isinstance(node, dict):
        metadata = node.get("metadata")
        if isinstance(metadata, dict):
            annotations = metadata.get("annotations")
            if isinstance(annotations, dict) and isinstance(annotations.get(ANNOTATION), str):
                yield annotations[ANNOTATION]
        for value in node.values():
            yield from _annotation_values(value)
    elif isinstance(node, list):
        for item in node:
            yield from _annotation_values(item)


def collect_policies(directory: Path) -> dict[str, bytes]:
    """Policy hash (hex) → initdata TOML for every annotated workload under `directory`."""
    policies: dict[str, bytes] = {}
    for path in yaml_files(directory):
        try:
            data = read_bounded(
                path,
                yamlbounds.MAX_FILE_BYTES,
                what="the resource file",
                hint="pass the directory of the resources contrast generate wrote",
            )
            documents = yamlbounds.load_all_safe(data.decode(), str(path))
        except (OSError, YAMLError, UnicodeDecodeError) as error:
            raise ResourceError(f"cannot read {path}: {error}") from None
        for document in documents:
            for value in _annotation_values(document):
                toml = decode_annotation(value)
                policies[policy_hash(toml).hex()] = toml
    return policies
