"""`contrast runtime` and `contrast coordinator-resources`: the release's Kubernetes resources.

`contrast runtime reference-values` is the release build step that measures a platform's guest
image and writes its default reference values (`contrast.manifest.defaults`).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from contrast.attestation.snp.launch import DEFAULT_VCPU_COUNTS, GuestImage
from contrast.attestation.tdx import measure
from contrast.attestation.tdx.eventlog import read_event_log
from contrast.errors import ContrastError
from contrast.kuberesource import release
from contrast.manifest import defaults
from contrast.platforms import PLATFORMS, Tee, by_name


def register(commands: Any) -> None:
    names = [platform.name for platform in PLATFORMS]
    runtime = commands.add_parser(
        "runtime", help="print the RuntimeClass and node-installer DaemonSet of a platform"
    )
    # Required for printing the resources; checked in run_runtime so that the subcommand below can
    # take its own --platform.
    runtime.add_argument("--platform", choices=names, type=str.lower)
    runtime.add_argument(
        "--node-selector", action="append", default=[], metavar="KEY=VALUE",
        help="schedule confidential pods (and the installer) on matching nodes only",
    )  # fmt: skip
    runtime.set_defaults(run=run_runtime, runtime_parser=runtime)
    _register_reference_values(runtime, names)
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


def _register_reference_values(runtime: argparse.ArgumentParser, names: list[str]) -> None:
    subcommands = runtime.add_subparsers(dest="runtime_command", metavar="SUBCOMMAND")
    values = subcommands.add_parser(
        "reference-values",
        help="measure a platform's guest image and print (or embed) its default reference values",
    )
    real = [name for name in names if not by_name(name).emulated]
    values.add_argument("--platform", required=True, choices=real, type=str.lower)
    values.add_argument(
        "--firmware", type=Path, required=True, help="OVMF (SNP: AmdSev build; TDX: TDVF)"
    )
    values.add_argument("--kernel", type=Path, help="the bzImage the VMM boots directly")
    values.add_argument("--initrd", type=Path)
    values.add_argument("--cmdline", default="", help="the kernel command line the VMM passes")
    values.add_argument(
        "--max-vcpus", type=int, default=max(DEFAULT_VCPU_COUNTS),
        help="SNP: one launch digest per product and vCPU count 1..N (default 8)",
    )  # fmt: skip
    rtmr0 = values.add_mutually_exclusive_group()
    rtmr0.add_argument("--tdx-rtmr0", metavar="HEX", help="TDX: RTMR0 of a known-good boot")
    rtmr0.add_argument(
        "--tdx-event-log", nargs=2, type=Path, metavar=("CCEL_TABLE", "CCEL_DATA"),
        help="TDX: take RTMR0 from the replayed event log of a known-good boot",
    )  # fmt: skip
    values.add_argument(
        "--tdx-page-add-order", choices=[order.value for order in measure.PageAddOrder],
        default=measure.PageAddOrder.TWO_PASS.value,
        help="TDX: how the host adds and measures firmware pages (see attestation/tdx/measure.py)",
    )  # fmt: skip
    values.add_argument(
        "--output", type=Path, metavar="FILE",
        help="add the entries to this reference-values.json (keyed by runtime handler) instead of"
        " printing them",
    )  # fmt: skip
    values.set_defaults(run=run_reference_values)


def run_reference_values(arguments: argparse.Namespace) -> int:
    platform = by_name(arguments.platform)
    if platform.tee is Tee.SNP:
        if arguments.tdx_rtmr0 or arguments.tdx_event_log:
            raise ContrastError("--tdx-rtmr0 and --tdx-event-log are for TDX platforms")
        image = GuestImage(
            arguments.firmware, arguments.kernel, arguments.initrd, arguments.cmdline
        )
        entries = defaults.snp_reference_values(
            image, platform, vcpu_counts=range(1, arguments.max_vcpus + 1)
        )
    else:
        entries = defaults.tdx_reference_values(platform, _tdx_measurements(arguments))
    if arguments.output is None:
        document = {platform.runtime_class_name: {platform.tee.value: entries}}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        defaults.update_embedded(arguments.output, platform, entries)
        print(
            f"wrote {len(entries)} {platform.tee.value} entries for"
            f" {platform.runtime_class_name} to {arguments.output}",
            file=sys.stderr,
        )
    for note in defaults.missing_value_notes(platform):
        print(f"note: {note}", file=sys.stderr)
    return 0


def _tdx_measurements(arguments: argparse.Namespace) -> measure.TdxLaunchMeasurements:
    if arguments.kernel is None:
        raise ContrastError("TDX reference values need --kernel (direct boot)")
    rtmr0: bytes | None = None
    if arguments.tdx_rtmr0:
        try:
            rtmr0 = bytes.fromhex(arguments.tdx_rtmr0)
        except ValueError:
            raise ContrastError("--tdx-rtmr0 is not hex") from None
    elif arguments.tdx_event_log:
        table, data = (_read(path) for path in arguments.tdx_event_log)
        rtmr0 = read_event_log(table, data).replay()[0]
    return measure.predict(
        _read(arguments.firmware),
        _read(arguments.kernel),
        None if arguments.initrd is None else _read(arguments.initrd),
        arguments.cmdline,
        rtmr0=rtmr0,
        order=measure.PageAddOrder(arguments.tdx_page_add_order),
    )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise ContrastError(f"cannot read {path}: {error.strerror}") from None


def run_runtime(arguments: argparse.Namespace) -> int:
    if arguments.platform is None:
        arguments.runtime_parser.error("the following arguments are required: --platform")
    platform = by_name(arguments.platform)
    print_documents(
        release.runtime_resources(platform, node_selector=_selector(arguments.node_selector))
    )
    return 0


def run_coordinator_resources(arguments: argparse.Namespace) -> int:
    print_documents(release.coordinator_resources(by_name(arguments.platform)))
    return 0
