"""`contrast node-installer`: the node-installer DaemonSet's program (research/contrast.md §8)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from contrast.cli.errors import UsageError
from contrast.nodeinstaller.install import (
    InstallReport,
    InstallRequest,
    artefacts_dir,
    install_runtime,
)
from contrast.nodeinstaller.restart import SYSTEMD_DBUS_RESTART, parse_command
from contrast.nodeinstaller.targetconfig import load_target_config
from contrast.platforms import PLATFORMS, by_name
from contrast.runtimedescription.model import Build
from contrast.runtimedescription.shipped import load_payload


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "node-installer",
        help="install a platform's runtime into a node's root and add it to containerd",
        description="Checks every artefact's sha256 before changing anything, installs the"
        " artefacts under /opt/edgeless/<runtime>/, writes the Kata config, adds the runtime"
        " handler to containerd's config and restarts containerd if that config changed.",
    )
    parser.add_argument("--host-root", type=Path, required=True, help="the node's / (e.g. /host)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--platform", type=str.lower, choices=[p.name for p in PLATFORMS],
        help="install this release's runtime of the platform (its artefacts are in the image)",
    )  # fmt: skip
    source.add_argument(
        "--payload", type=Path, metavar="DIR",
        help="install the built runtime in DIR (`contrast runtime build`'s runtimes/<handler>:"
        " runtime.json and exactly the files it pins)",
    )  # fmt: skip
    parser.add_argument(
        "--target-config", type=Path, metavar="PATH",
        help="the node's layout: a ConfigMap directory (one file per key) or a JSON file",
    )  # fmt: skip
    parser.add_argument(
        "--artefacts", type=Path, metavar="DIR",
        help="where the artefacts are, laid out as under the install directory"
        " (default: artefacts-dir of the target config, else /usr/share/contrast/runtimes/P)",
    )  # fmt: skip
    parser.add_argument(
        "--no-restart", action="store_true", help="never restart containerd (it is told to)"
    )
    parser.add_argument(
        "--restart-command", metavar="CMD",
        help="restart containerd with CMD instead of systemd over D-Bus; {unit} stands for"
        " the unit, e.g. 'nsenter --target 1 --mount -- systemctl restart {unit}'",
    )  # fmt: skip
    parser.set_defaults(run=run_node_installer)


def run_node_installer(arguments: argparse.Namespace) -> int:
    description = None
    if arguments.payload is not None:
        if arguments.artefacts is not None:
            raise UsageError("--artefacts is for --platform; a payload holds its artefacts")
        description = load_payload(arguments.payload)
        platform = by_name(description.platform)
    else:
        platform = by_name(arguments.platform)
    target = load_target_config(arguments.target_config)
    command = (
        SYSTEMD_DBUS_RESTART
        if arguments.restart_command is None
        else parse_command(arguments.restart_command)
    )
    report = install_runtime(
        InstallRequest(
            host_root=arguments.host_root,
            platform=platform,
            target=target,
            artefacts_dir=arguments.payload or artefacts_dir(arguments.artefacts, target, platform),
            restart=not arguments.no_restart,
            restart_command=command,
        ),
        description=description,
    )
    _print_report(report)
    return 0


def _print_report(report: InstallReport) -> None:
    # The emulated platforms have no artefacts, so nothing of theirs stands in for a release's.
    if report.build is Build.STAND_IN and "-emulated-" not in report.runtime_name:
        print(
            "warning: this runtime is made of stand-in artefacts of an unreleased build;"
            " it installs, but confidential pods will not start",
            file=sys.stderr,
        )
    print(f"runtime {report.runtime_name} in {report.install_dir}")
    print(f"files written: {len(report.written)}")
    for path in report.written:
        print(f"  {path}")
    if report.config_changed:
        backup = f" (backup {report.backup})" if report.backup else " (new file)"
        print(f"containerd config {report.containerd_config}: runtime added{backup}")
    else:
        print(f"containerd config {report.containerd_config}: unchanged")
    if report.restarted:
        print(
            f"containerd restarted{f' ({report.restarted_unit})' if report.restarted_unit else ''}"
        )
    else:
        print(f"containerd not restarted: {report.no_restart_reason}")
