"""`contrast runtime` and `contrast coordinator-resources`: the release's Kubernetes resources."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from typing import Any

from ruamel.yaml import YAML

from contrast.errors import ContrastError
from contrast.kuberesource import release
from contrast.platforms import PLATFORMS, by_name


def register(commands: Any) -> None:
    names = [platform.name for platform in PLATFORMS]
    runtime = commands.add_parser(
        "runtime", help="print the RuntimeClass and node-installer DaemonSet of a platform"
    )
    runtime.add_argument("--platform", required=True, choices=names, type=str.lower)
    runtime.add_argument(
        "--node-selector", action="append", default=[], metavar="KEY=VALUE",
        help="schedule confidential pods (and the installer) on matching nodes only",
    )  # fmt: skip
    runtime.set_defaults(run=run_runtime)
    coordinator = commands.add_parser(
        "coordinator-resources", help="print the Coordinator StatefulSet and its Services"
    )
    coordinator.add_argument("--platform", required=True, choices=names, type=str.lower)
    coordinator.set_defaults(run=run_coordinator_resources)


def _selector(pairs: Sequence[str]) -> dict[str, str]:
    selector = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise ContrastError(f"--node-selector {pair!r} is not KEY=VALUE")
        selector[key] = value
    return selector


def print_documents(documents: Sequence[dict[str, Any]]) -> None:
    yaml = YAML()
    yaml.default_flow_style = False
    # Shared sub-dicts (labels) would otherwise come out as YAML anchors and aliases.
    yaml.representer.ignore_aliases = lambda *_: True
    buffer = io.StringIO()
    yaml.dump_all(documents, buffer)
    sys.stdout.write(buffer.getvalue())


def run_runtime(arguments: argparse.Namespace) -> int:
    platform = by_name(arguments.platform)
    print_documents(
        release.runtime_resources(platform, node_selector=_selector(arguments.node_selector))
    )
    return 0


def run_coordinator_resources(arguments: argparse.Namespace) -> int:
    print_documents(release.coordinator_resources(by_name(arguments.platform)))
    return 0
