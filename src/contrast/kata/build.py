"""`contrast runtime build`: a Kata release in, a runtime for one platform out.

What it writes into the output directory (the workspace `generate` runs in):

- `runtimes/<handler>/`: the node installer's payload, `runtime.json` (the runtime description,
  every artefact pinned by sha256 and size) and the artefacts at their paths below
  `/opt/edgeless/<handler>/`: the Kata shim as `bin/containerd-shim-contrast-cc-v2`, QEMU behind a
  small wrapper that gives it its data directory (see `layout`), its option ROMs, the kernel, the
  measured image (or initrd), the firmware and the Kata configuration (`config.render`);
- `reference-values.json`: the platform's reference values keyed by the handler (SNP: a launch
  digest per product and vCPU count from sev-snp-measure; TDX: MRTD and RTMR1/RTMR2 predicted,
  RTMR0 as given or expected missing), replacing earlier runtimes of the same platform;
- `runtime-<platform>.yml`: the RuntimeClass and node-installer DaemonSet of the handler;
- with `node_installer_layout`, `node-installer-<platform>/`: an OCI layout holding the release's
  node-installer image with the payload as one more layer (`contrast.imagebuild.payloadimage`),
  which the DaemonSet then names by digest.

The handler is `contrast-cc-<platform>-<8 hex>` from the description's content and the installer's
source (`runtimedescription.digest`): a changed kernel byte is a new handler and new digests.

Everything is read, checked and measured before the first write, so a release that lacks a file
(or a node-installer layout without the image) changes nothing. The payload is assembled in a
scratch directory and renamed into place. Release files are read through the descriptors
`archive` opened without leaving the release, so the files measured and copied are the ones it
checked.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from contrast.attestation.snp.launch import DEFAULT_VCPU_COUNTS, GuestImage
from contrast.attestation.tdx import measure
from contrast.attestation.tee import Tee
from contrast.files import replace_directory, write_atomically
from contrast.imagebuild import payloadimage
from contrast.kata import cmdline, config, layout
from contrast.kata.archive import KataRelease, open_release
from contrast.kata.errors import BuildRequestRefused, KataReleaseError
from contrast.kata.tree import ReleaseFile
from contrast.kuberesource import release, yamlio
from contrast.manifest import defaults
from contrast.nodeinstaller.layout import kata_config_relative
from contrast.platforms import Platform
from contrast.runtimedescription.digest import handler_of, stamp_artefact
from contrast.runtimedescription.model import (
    DESCRIPTION_FORMAT,
    INSTALL_PREFIX,
    PAYLOAD_DESCRIPTION,
    Artefact,
    ArtefactRole,
    Build,
    RuntimeDescription,
)

RUNTIMES = "runtimes"
MAX_CONFIG_SIZE = 1 << 20  # a Kata configuration is some 30 KB
REFERENCE_VALUES = "reference-values.json"
SHIM = PurePosixPath("bin/containerd-shim-contrast-cc-v2")
WRAPPED_SUFFIX = "-wrapped"
KATA_CONFIG_TEMPLATE_SUFFIX = ".in"
_NAME_CHARACTERS = re.compile(r"[^a-z0-9.-]+")
QEMU_WRAPPER = """\
#!/bin/sh
# Written by `contrast runtime build`. Kata's QEMU was built for /opt/kata (--disable-relocatable);
# -L gives it its option ROMs from this runtime's install directory instead.
here="${{0%/*}}"
exec "$here/{program}" -L "$here/../{data}" "$@"
"""


@dataclass(frozen=True)
class BuildRequest:
    release: Path
    platform: Platform
    output: Path
    max_vcpus: int = max(DEFAULT_VCPU_COUNTS)
    tdx_rtmr0: bytes | None = None
    tdx_page_add_order: measure.PageAddOrder = measure.PageAddOrder.TWO_PASS
    node_selector: dict[str, str] = field(default_factory=dict)
    payload_image: str | None = None
    node_installer_layout: Path | None = None  # with image_repository: write the payload image
    image_repository: str | None = None


@dataclass(frozen=True)
class BuiltRuntime:
    platform: Platform
    handler: str
    description: RuntimeDescription
    payload: Path
    reference_values: Path
    resources: Path
    kernel_cmdline: str
    entries: list[dict[str, Any]]
    notes: list[str]
    image: payloadimage.PayloadImage | None = None


@dataclass(frozen=True)
class _File:
    """One artefact before it is copied: what it is, where it goes, where it comes from."""

    name: str
    role: ArtefactRole
    relative: PurePosixPath  # below the install directory
    executable: bool
    source: ReleaseFile | None = None  # a release file, or
    data: bytes | None = None  # bytes this build writes (the QEMU wrapper, the Kata config)


@dataclass(frozen=True)
class _Plan:
    files: list[_File]
    settings: config.HypervisorSettings
    kernel: ReleaseFile
    initrd: ReleaseFile | None
    firmware: ReleaseFile


def _artefact_name(prefix: str, relative: PurePosixPath) -> str:
    return prefix + _NAME_CHARACTERS.sub("-", str(relative).lower()).strip("-.")


def _qemu_data(release: KataRelease, qemu: PurePosixPath) -> Iterator[_File]:
    data = layout.qemu_data_directory(qemu)
    if not release.is_dir(data):
        raise KataReleaseError(
            f"the release has no QEMU data directory {layout.PREFIX / data} for"
            f" {layout.PREFIX / qemu}"
        )
    for relative in release.files_below(data):
        source = release.find(relative)
        assert source is not None  # listed just now
        name = _artefact_name("qemu-data-", relative.relative_to(data))
        yield _File(name, ArtefactRole.VMM_DATA, relative, False, source=source)


def _plan(release: KataRelease, platform: Platform) -> tuple[_Plan, str]:
    """Every file of the runtime and the Kata config template, or the first thing missing."""
    config_relative = layout.config_file(platform)
    config_file = release.find(config_relative)
    if config_file is None:
        raise KataReleaseError(
            f"the release has no {layout.PREFIX / config_relative}",
            hint=f"{platform.display_name} cannot be built from {release.source}; a release with"
            f" {platform.tee.value.upper()} support ships it",
        )
    name = str(layout.PREFIX / config_relative)
    try:
        text = config_file.read(limit=MAX_CONFIG_SIZE).decode()
    except UnicodeDecodeError:
        raise KataReleaseError(f"{name} is not UTF-8 text") from None
    settings = config.settings(config.parse(text, name), name, platform)

    def resolve(absolute: str, what: str) -> tuple[PurePosixPath, ReleaseFile]:
        return release.resolve(absolute, what)

    qemu, qemu_file = resolve(settings.qemu, "QEMU")
    kernel, kernel_file = resolve(settings.kernel, "guest kernel")
    firmware, firmware_file = resolve(settings.firmware, "firmware")
    disk_role = ArtefactRole.ROOTFS if settings.image else ArtefactRole.INITRD
    disk, disk_file = resolve(
        settings.image or settings.initrd, "guest image" if settings.image else "initrd"
    )
    shim_file = release.find(layout.SHIM)
    if shim_file is None:
        raise KataReleaseError(f"the release has no Kata shim {layout.PREFIX / layout.SHIM}")
    wrapped = qemu.with_name(qemu.name + WRAPPED_SUFFIX)
    wrapper = QEMU_WRAPPER.format(program=wrapped.name, data=layout.qemu_data_directory(qemu))
    files = [
        _File("containerd-shim", ArtefactRole.SHIM, SHIM, True, source=shim_file),
        _File("qemu", ArtefactRole.VMM, qemu, True, data=wrapper.encode()),
        _File("qemu-binary", ArtefactRole.VMM_BINARY, wrapped, True, source=qemu_file),
        *_qemu_data(release, qemu),
        _File("kernel", ArtefactRole.KERNEL, kernel, False, source=kernel_file),
        _File(disk_role.value, disk_role, disk, False, source=disk_file),
        _File("firmware", ArtefactRole.FIRMWARE, firmware, False, source=firmware_file),
    ]
    tool = release.find(layout.KATA_RUNTIME)
    if tool is not None:
        files.append(_File("kata-runtime", ArtefactRole.TOOL, layout.KATA_RUNTIME, True, tool))

    def move(absolute: str) -> str:
        relative = PurePosixPath(absolute).relative_to(layout.PREFIX)
        return f"{INSTALL_PREFIX}{relative}"

    rendered = config.render(text, name, platform, move)
    kata_config = kata_config_relative(platform)
    assert kata_config is not None  # a QEMU platform
    template = PurePosixPath(kata_config + KATA_CONFIG_TEMPLATE_SUFFIX)
    files.append(
        _File("kata-config", ArtefactRole.KATA_CONFIG, template, False, data=rendered.encode())
    )
    # The command line comes from the rendered file, the one the shim reads.
    rendered_settings = config.settings(config.parse(rendered, name), name, platform)
    plan = _Plan(
        files,
        rendered_settings,
        kernel_file,
        None if settings.image else disk_file,
        firmware_file,
    )
    return plan, kata_config


def _measure(plan: _Plan, request: BuildRequest, line: str) -> list[dict[str, Any]]:
    platform = request.platform
    if platform.tee is Tee.SNP:
        if request.tdx_rtmr0 is not None:
            raise BuildRequestRefused("--tdx-rtmr0 and --tdx-event-log are for TDX platforms")
        initrd = None if plan.initrd is None else plan.initrd.path
        image = GuestImage(plan.firmware.path, plan.kernel.path, initrd, line)
        return defaults.snp_reference_values(
            image, platform, vcpu_counts=range(1, request.max_vcpus + 1)
        )
    predicted = measure.predict(
        plan.firmware.read(),
        plan.kernel.read(),
        None if plan.initrd is None else plan.initrd.read(),
        line,
        rtmr0=request.tdx_rtmr0,
        order=request.tdx_page_add_order,
    )
    return defaults.tdx_reference_values(platform, predicted)


def _copy(file: _File, staging: Path) -> Artefact:
    target = staging / str(file.relative)
    target.parent.mkdir(parents=True, exist_ok=True)
    if file.data is not None:
        target.write_bytes(file.data)
    else:
        assert file.source is not None
        with target.open("wb") as out:
            for chunk in file.source.chunks():
                out.write(chunk)
    target.chmod(0o755 if file.executable else 0o644)
    return stamp_artefact(
        name=file.name,
        role=file.role,
        relative=str(file.relative),
        file=target,
        executable=file.executable,
    )


def _check_names(files: list[_File]) -> None:
    seen: dict[str, PurePosixPath] = {}
    for file in files:
        if file.name in seen:
            raise KataReleaseError(
                f"two files of the release would be the same artefact {file.name!r}:"
                f" {seen[file.name]} and {file.relative}"
            )
        seen[file.name] = file.relative


def _read_only(path: Path) -> bool:
    return not os.access(path, os.W_OK) or not stat.S_ISDIR(path.stat().st_mode)


def build_runtime(request: BuildRequest) -> BuiltRuntime:
    """Build `request.platform`'s runtime from the Kata release into `request.output`."""
    platform = request.platform
    if request.max_vcpus < 1:
        raise BuildRequestRefused(f"--max-vcpus must be at least 1, got {request.max_vcpus}")
    output = request.output
    if output.exists() and _read_only(output):
        raise BuildRequestRefused(f"the output {output} is not a writable directory")
    runtimes = output / RUNTIMES
    base = _base_image(request)
    with open_release(request.release, output) as kata:
        plan, kata_config = _plan(kata, platform)
        _check_names(plan.files)
        line = cmdline.kernel_command_line(plan.settings)
        entries = _measure(plan, request, line)
        runtimes.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=runtimes))
        try:
            artefacts = [_copy(file, staging) for file in plan.files]
            source = kata.source if kata.sha256 is None else f"{kata.source} sha256:{kata.sha256}"
            if kata.version:
                source = f"Kata {kata.version}, {source}"
            description = RuntimeDescription(
                format=DESCRIPTION_FORMAT,
                platform=platform.name,
                build=Build.RELEASE,
                kernel_params=line,
                kata_config=f"{INSTALL_PREFIX}{kata_config}",
                artefacts=tuple(artefacts),
                source=source,
            )
            handler = handler_of(description)
            write_atomically(staging / PAYLOAD_DESCRIPTION, description.to_json().encode())
            payload = runtimes / handler
            replace_directory(staging, payload)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    image = None
    payload_image = request.payload_image
    if base is not None:
        assert request.image_repository is not None  # checked by _base_image
        image = payloadimage.write_payload_image(
            base,
            payload,
            handler,
            output / f"node-installer-{platform.name}",
            repository=request.image_repository,
        )
        payload_image = image.pinned
    values = output / REFERENCE_VALUES
    defaults.update_embedded(values, platform, entries, handler=handler)
    resources = output / f"runtime-{platform.name}.yml"
    documents = release.runtime_resources(
        platform,
        node_selector=request.node_selector,
        payload=release.Payload(handler, payload_image),
    )
    write_atomically(resources, yamlio.dump_documents(documents).encode())
    return BuiltRuntime(
        platform=platform,
        handler=handler,
        description=description,
        payload=payload,
        reference_values=values,
        resources=resources,
        kernel_cmdline=line,
        entries=entries,
        notes=defaults.missing_value_notes(platform, entries),
        image=image,
    )


def _base_image(request: BuildRequest) -> payloadimage.BaseImage | None:
    """The node-installer image to add the payload to, read and checked before any write."""
    if request.node_installer_layout is None:
        if request.image_repository is not None:
            raise BuildRequestRefused("--image-repository is for --node-installer-layout")
        return None
    if request.payload_image is not None:
        raise BuildRequestRefused("--payload-image and --node-installer-layout exclude each other")
    if request.image_repository is None:
        raise BuildRequestRefused(
            "--node-installer-layout needs --image-repository REPO",
            hint="the repository you push the image to; the DaemonSet names it REPO@sha256:...",
        )
    payloadimage.check_repository(request.image_repository)
    return payloadimage.read_base(request.node_installer_layout)
