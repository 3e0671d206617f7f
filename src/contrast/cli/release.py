"""`contrast runtime` and `contrast coordinator-resources`: the release's Kubernetes resources.

`contrast runtime build` turns a Kata static release into a platform's runtime in the workspace
(`contrast.kata.build`); `contrast runtime reference-values` measures a guest image given file by
file and writes its reference values (`contrast.manifest.defaults`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contrast.attestation.snp.launch import DEFAULT_VCPU_COUNTS, GuestImage
from contrast.attestation.tdx import measure
from contrast.attestation.tdx.eventlog import read_event_log
from contrast.attestation.tee import Tee
from contrast.boundedfile import check_size, read_bounded
from contrast.cli.errors import CliError, UsageError
from contrast.cli.imagereplace import add_image_replacements, image_replacements
from contrast.history.backends import HistoryBackend
from contrast.kata.build import BuildRequest, build_runtime
from contrast.kuberesource import release, releaseimages, yamlio
from contrast.manifest import defaults
from contrast.platforms import PLATFORMS, by_name

# Bounds on the guest image files `reference-values` measures in memory (TDX) and on the event
# log it replays, far above real ones: TDVF is 4 MiB, Kata's kernel about 10 MiB, its initrd
# tens of MiB, the CCEL table 56 bytes and its log tens of KiB.
FIRMWARE_MAX_BYTES = 256 << 20
KERNEL_MAX_BYTES = 256 << 20
INITRD_MAX_BYTES = 1 << 30
EVENT_LOG_MAX_BYTES = 16 << 20
_GUEST_FILE = "pass the file the runtime installs"


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
    add_image_replacements(runtime)
    runtime.set_defaults(run=run_runtime, runtime_parser=runtime)
    subcommands = runtime.add_subparsers(dest="runtime_command", metavar="SUBCOMMAND")
    _register_build(subcommands, names)
    _register_reference_values(subcommands, names)
    coordinator = commands.add_parser(
        "coordinator-resources", help="print the Coordinator StatefulSet and its Services"
    )
    coordinator.add_argument("--platform", required=True, choices=names, type=str.lower)
    add_image_replacements(coordinator)
    coordinator.add_argument(
        "--history", type=HistoryBackend, choices=list(HistoryBackend),
        default=HistoryBackend.CONFIGMAPS,
        help="where the Coordinators keep the manifest history: ConfigMaps (several replicas,"
        " with their ServiceAccount, Role and RoleBinding) or files on a volume (one replica);"
        " default: configmaps",
    )  # fmt: skip
    coordinator.add_argument(
        "--replicas", type=int, metavar="N",
        help="Coordinator replicas (default: 3 with configmaps, 1 with files)",
    )  # fmt: skip
    coordinator.add_argument(
        "--namespace", help="put every resource in this namespace (default: kubectl's)"
    )
    coordinator.set_defaults(run=run_coordinator_resources)


def _selector(pairs: Sequence[str]) -> dict[str, str]:
    selector = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise UsageError(f"--node-selector {pair!r} is not KEY=VALUE")
        selector[key] = value
    return selector


def print_documents(documents: Sequence[dict[str, Any]]) -> None:
    sys.stdout.write(yamlio.dump_documents(documents))


def _without_image_replacements(arguments: argparse.Namespace, command: str) -> None:
    """`runtime --image-replacements F build` would take the flag and ignore it: refuse."""
    if arguments.image_replacements is not None:
        raise UsageError(
            f"--image-replacements applies to the printed resources, not to `runtime {command}`",
            hint="it replaces images in the output of `contrast runtime --platform P`",
        )


def _add_tdx_rtmr0(parser: argparse.ArgumentParser) -> None:
    rtmr0 = parser.add_mutually_exclusive_group()
    rtmr0.add_argument("--tdx-rtmr0", metavar="HEX", help="TDX: RTMR0 of a known-good boot")
    rtmr0.add_argument(
        "--tdx-event-log", nargs=2, type=Path, metavar=("CCEL_TABLE", "CCEL_DATA"),
        help="TDX: take RTMR0 from the replayed event log of a known-good boot",
    )  # fmt: skip
    parser.add_argument(
        "--tdx-page-add-order", choices=[order.value for order in measure.PageAddOrder],
        default=measure.PageAddOrder.TWO_PASS.value,
        help="TDX: how the host adds and measures firmware pages (see attestation/tdx/measure.py)",
    )  # fmt: skip


def _add_max_vcpus(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-vcpus", type=int, default=max(DEFAULT_VCPU_COUNTS),
        help="SNP: one launch digest per product and vCPU count 1..N (default 8)",
    )  # fmt: skip


def _register_build(subcommands: Any, names: list[str]) -> None:
    build = subcommands.add_parser(
        "build",
        help="turn a Kata static release into a runtime: node-installer payload, RuntimeClass"
        " and DaemonSet, reference values",
        description="Reads kata-static-<version>-amd64.tar.zst (or .tar.xz, or the directory it"
        " unpacks to), takes the platform's QEMU, kernel, image, firmware and configuration, and"
        " writes into DIR: runtimes/<handler>/ (the payload, every file pinned by sha256),"
        " reference-values.json (keyed by the handler) and runtime-<platform>.yml; with"
        " --node-installer-layout also node-installer-<platform>/, an OCI layout holding the"
        " node-installer image with the payload, which the DaemonSet names by digest.",
    )
    buildable = [name for name in names if not by_name(name).emulated]
    build.add_argument("--kata-release", type=Path, required=True, metavar="FILE_OR_DIR")
    build.add_argument("--platform", required=True, choices=buildable, type=str.lower)
    build.add_argument(
        "--output", type=Path, default=Path("."), metavar="DIR",
        help="the workspace to write into (default: .), where `contrast generate` then finds"
        " the reference values",
    )  # fmt: skip
    _add_max_vcpus(build)
    _add_tdx_rtmr0(build)
    build.add_argument(
        "--node-selector", action="append", default=[], metavar="KEY=VALUE",
        help="schedule confidential pods (and the installer) on matching nodes only",
    )  # fmt: skip
    build.add_argument(
        "--payload-image", metavar="IMAGE",
        help="run the installer from this image, which holds contrast and the payload at"
        " /usr/share/contrast/runtimes/<handler> (default: the node-installer image, reading the"
        " payload from /var/lib/contrast/payloads/<handler> on the node)",
    )  # fmt: skip
    build.add_argument(
        "--node-installer-layout", type=Path, metavar="LAYOUT",
        help="the OCI layout holding the release's node-installer image (contrast-build-images"
        " --output LAYOUT); the image with the payload as one more layer is written to"
        " node-installer-<platform>/ in the --output directory, for you to push with the"
        " printed skopeo command; needs --image-repository",
    )  # fmt: skip
    build.add_argument(
        "--image-repository", metavar="REPO",
        help="where you push that image (registry.example.com/contrast/node-installer): the"
        " DaemonSet runs REPO@sha256:<digest>, the layout tags it REPO:<handler>",
    )  # fmt: skip
    build.set_defaults(run=run_build)


def run_build(arguments: argparse.Namespace) -> int:
    _without_image_replacements(arguments, "build")
    built = build_runtime(
        BuildRequest(
            release=arguments.kata_release,
            platform=by_name(arguments.platform),
            output=arguments.output,
            max_vcpus=arguments.max_vcpus,
            tdx_rtmr0=_rtmr0(arguments),
            tdx_page_add_order=measure.PageAddOrder(arguments.tdx_page_add_order),
            node_selector=_selector(arguments.node_selector),
            payload_image=arguments.payload_image,
            node_installer_layout=arguments.node_installer_layout,
            image_repository=arguments.image_repository,
        )
    )
    tee = built.platform.tee.value
    print(f"runtime {built.handler} ({built.platform.display_name})")
    print(f"  payload:          {built.payload} ({len(built.description.artefacts)} files)")
    print(f"  reference values: {built.reference_values} ({len(built.entries)} {tee} entries)")
    print(f"  resources:        {built.resources}")
    if built.image is not None:
        print(f"  image:            {built.image.pinned} in {built.image.layout}")
        print(f"                    (node-installer {built.image.base} + payload layer)")
        print(f"  push:             {built.image.push_command_line()}")
    print(f"  kernel command line: {built.kernel_cmdline}")
    for note in built.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _register_reference_values(subcommands: Any, names: list[str]) -> None:
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
    _add_max_vcpus(values)
    _add_tdx_rtmr0(values)
    values.add_argument(
        "--output", type=Path, metavar="FILE",
        help="add the entries to this reference-values.json (keyed by runtime handler) instead of"
        " printing them",
    )  # fmt: skip
    values.set_defaults(run=run_reference_values)


def run_reference_values(arguments: argparse.Namespace) -> int:
    _without_image_replacements(arguments, "reference-values")
    platform = by_name(arguments.platform)
    if platform.tee is Tee.SNP:
        if arguments.tdx_rtmr0 or arguments.tdx_event_log:
            raise UsageError("--tdx-rtmr0 and --tdx-event-log are for TDX platforms")
        for path, what, bound in (
            (arguments.firmware, "firmware", FIRMWARE_MAX_BYTES),
            (arguments.kernel, "kernel", KERNEL_MAX_BYTES),
            (arguments.initrd, "initrd", INITRD_MAX_BYTES),
        ):
            _check_size(path, what, bound)
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
    for note in defaults.missing_value_notes(platform, entries):
        print(f"note: {note}", file=sys.stderr)
    return 0


def _rtmr0(arguments: argparse.Namespace) -> bytes | None:
    """RTMR0 from --tdx-rtmr0 or a replayed --tdx-event-log; None leaves it to the operator."""
    if arguments.tdx_rtmr0:
        try:
            return bytes.fromhex(arguments.tdx_rtmr0)
        except ValueError:
            raise UsageError("--tdx-rtmr0 is not hex") from None
    if arguments.tdx_event_log:
        table, data = (
            _read(path, "TDX event log", EVENT_LOG_MAX_BYTES) for path in arguments.tdx_event_log
        )
        return read_event_log(table, data).replay()[0]
    return None


def _tdx_measurements(arguments: argparse.Namespace) -> measure.TdxLaunchMeasurements:
    if arguments.kernel is None:
        raise UsageError("TDX reference values need --kernel (direct boot)")
    rtmr0 = _rtmr0(arguments)
    return measure.predict(
        _read(arguments.firmware, "firmware", FIRMWARE_MAX_BYTES),
        _read(arguments.kernel, "kernel", KERNEL_MAX_BYTES),
        None if arguments.initrd is None else _read(arguments.initrd, "initrd", INITRD_MAX_BYTES),
        arguments.cmdline,
        rtmr0=rtmr0,
        order=measure.PageAddOrder(arguments.tdx_page_add_order),
    )


def _check_size(path: Path | None, what: str, max_bytes: int) -> None:
    """The bound of `_read` for a file sev-snp-measure reads itself (SNP), checked by its size.

    Only regular files are measured (`launch_digest` refuses anything else), so the size is
    all there is to check here.
    """
    if path is not None:
        check_size(path, max_bytes, what=f"the {what}", hint=_GUEST_FILE)


def _read(path: Path, what: str, max_bytes: int) -> bytes:
    """A guest image file, within its bound (`contrast.boundedfile`): measured whole in memory."""
    try:
        return read_bounded(path, max_bytes, what=f"the {what}", hint=_GUEST_FILE)
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}") from None


def run_runtime(arguments: argparse.Namespace) -> int:
    if arguments.platform is None:
        arguments.runtime_parser.error("the following arguments are required: --platform")
    platform = by_name(arguments.platform)
    replacements = image_replacements(arguments)
    selector = _selector(arguments.node_selector)
    documents = release.runtime_resources(platform, node_selector=selector)
    replacements.replace_all(documents)
    print_documents(documents)
    _note_source_build()
    return 0


def run_coordinator_resources(arguments: argparse.Namespace) -> int:
    replacements = image_replacements(arguments)
    documents = release.coordinator_resources(
        by_name(arguments.platform),
        history=arguments.history,
        replicas=arguments.replicas,
        namespace=arguments.namespace,
    )
    replacements.replace_all(documents)
    print_documents(documents)
    _note_source_build()
    return 0


def _note_source_build() -> None:
    """On stderr, so that the YAML on stdout stays what `kubectl apply -f -` reads."""
    if not releaseimages.pinned():
        print(releaseimages.SOURCE_BUILD_NOTE, file=sys.stderr)
