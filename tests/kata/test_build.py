"""`contrast runtime build` on a synthetic release of the real layout.

SNP launch digests are compared with sev-snp-measure's own command-line output for the same
firmware, kernel, command line and vCPUs; TDX values with the predictions of
`attestation.tdx.measure` for the same files. A release that lacks a platform's file names the
file and the platform and leaves the output as it was.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from contrast.attestation.tdx import measure
from contrast.cli.main import main
from contrast.kata.build import REFERENCE_VALUES
from contrast.kata.errors import KataReleaseError
from contrast.nodeinstaller.artefacts import verify_artefacts
from contrast.nodeinstaller.errors import ArtefactError
from contrast.runtimedescription.digest import runtime_hash_of
from contrast.runtimedescription.model import ArtefactRole
from contrast.runtimedescription.shipped import load_payload
from tests.kata import synthetic
from tests.kata.conftest import build

SEV_SNP_MEASURE = Path(sys.executable).with_name("sev-snp-measure")


def cli_digest(firmware: Path, kernel: Path, cmdline: str, vcpus: int, vcpu_type: str) -> str:
    """sev-snp-measure's own command line, as the original Contrast runs it (no initrd: the
    release boots its measured image, so QEMU hashes an empty initrd)."""
    completed = subprocess.run(
        [str(SEV_SNP_MEASURE), "--mode", "snp", "--vcpus", str(vcpus), "--vcpu-type", vcpu_type,
         "--ovmf", str(firmware), "--kernel", str(kernel), "--append", cmdline,
         "--guest-features", "0x1", "--output-format", "hex"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return completed.stdout.strip()


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes() if path.is_file() else b"<dir>"
        for path in sorted(root.rglob("*"))
    }


def test_snp_digests_are_sev_snp_measure_s_own(release: Path, tmp_path: Path) -> None:
    built = build(release, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=2)
    kernel = release / "opt/kata/share/kata-containers/vmlinuz-confidential.container"
    firmware = release / "opt/kata/share/ovmf/AMDSEV.fd"
    expected = [
        (product, cli_digest(firmware, kernel, built.kernel_cmdline, vcpus, f"EPYC-{product}"))
        for product in ("Milan", "Genoa")
        for vcpus in (1, 2)
    ]
    assert [(e["ProductName"], e["TrustedMeasurement"]) for e in built.entries] == expected
    assert len({digest for _, digest in expected}) == 4
    # The payload holds exactly the files that were measured.
    description = load_payload(built.payload)
    for role, source in (
        (ArtefactRole.KERNEL, kernel),
        (ArtefactRole.FIRMWARE, firmware),
    ):
        artefact = description.by_role(role)
        assert artefact is not None
        assert (built.payload / str(artefact.relative_path)).read_bytes() == source.read_bytes()
    assert description.kernel_params == built.kernel_cmdline


def test_tdx_values_are_the_predictions_for_the_release_files(
    release: Path, tmp_path: Path
) -> None:
    built = build(release, "metal-qemu-tdx", tmp_path / "workspace")
    kernel = (
        release / "opt/kata/share/kata-containers/vmlinuz-confidential.container"
    ).read_bytes()
    predicted = measure.predict(synthetic.tdvf(), kernel, None, built.kernel_cmdline)
    (entry,) = built.entries
    assert entry["MrTd"] == predicted.mr_td.hex() == measure.mrtd(synthetic.tdvf()).hex()
    assert entry["Rtmrs"] == [None, *(rtmr.hex() for rtmr in predicted.rtmrs[1:])]
    assert entry["MrSeam"] is None
    assert any("RTMR0" in note for note in built.notes)
    # An RTMR0 from a known-good boot fills the operator value.
    rtmr0 = bytes(range(48))
    again = build(release, "metal-qemu-tdx", tmp_path / "other", tdx_rtmr0=rtmr0)
    assert again.entries[0]["Rtmrs"][0] == rtmr0.hex()
    assert not any("RTMR0" in note for note in again.notes)
    assert again.handler == built.handler  # RTMR0 is a reference value, not part of the runtime


@pytest.mark.parametrize("platform", ["metal-qemu-snp", "metal-qemu-tdx"])
def test_a_changed_kernel_byte_changes_the_handler_and_the_values(
    platform: str, tmp_path: Path
) -> None:
    kernel = bytearray(synthetic.KERNEL)
    kernel[-100] ^= 0x01
    original = synthetic.write_tree(tmp_path / "a", synthetic.files())
    changed = synthetic.write_tree(tmp_path / "b", synthetic.files(kernel=bytes(kernel)))
    first = build(original, platform, tmp_path / "one", max_vcpus=1)
    second = build(changed, platform, tmp_path / "two", max_vcpus=1)
    assert first.handler != second.handler
    assert first.kernel_cmdline == second.kernel_cmdline
    key = "TrustedMeasurement" if platform.endswith("snp") else "Rtmrs"
    for before, after in zip(first.entries, second.entries, strict=True):
        assert before[key] != after[key]
    if platform.endswith("tdx"):
        (before,), (after,) = first.entries, second.entries
        assert before["MrTd"] == after["MrTd"]  # the firmware did not change
        assert before["Rtmrs"][1] != after["Rtmrs"][1]  # RTMR1 measures the kernel


@pytest.mark.parametrize("compression", ["zst", "xz", "gz"])
def test_a_tarball_builds_the_same_runtime_as_its_tree(
    compression: str, release: Path, tmp_path: Path
) -> None:
    tarball = synthetic.tarball(
        synthetic.files(), tmp_path / f"kata-static-3.99.0-amd64.tar.{compression}", compression
    )
    from_tree = build(release, "metal-qemu-snp", tmp_path / "tree", max_vcpus=1)
    from_tarball = build(tarball, "metal-qemu-snp", tmp_path / "tarball", max_vcpus=1)
    assert from_tarball.handler == from_tree.handler
    assert from_tarball.entries == from_tree.entries
    assert from_tarball.description.source is not None
    assert from_tarball.description.source.startswith(f"Kata {synthetic.VERSION}, {tarball.name}")
    # The scratch copy of the unpacked release is gone.
    assert sorted(p.name for p in (tmp_path / "tarball").iterdir()) == [
        REFERENCE_VALUES,
        "runtime-metal-qemu-snp.yml",
        "runtimes",
    ]
    assert [p.name for p in (tmp_path / "tarball" / "runtimes").iterdir()] == [from_tarball.handler]


def test_the_payload_is_pinned_and_the_installer_refuses_anything_else(
    release: Path, tmp_path: Path
) -> None:
    built = build(release, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=1)
    description = load_payload(built.payload)
    assert runtime_hash_of(description) == built.handler.rsplit("-", 1)[1]
    verify_artefacts(description, built.payload)
    roles = {artefact.role for artefact in description.artefacts}
    assert roles >= {
        ArtefactRole.SHIM, ArtefactRole.VMM, ArtefactRole.VMM_BINARY, ArtefactRole.VMM_DATA,
        ArtefactRole.KERNEL, ArtefactRole.ROOTFS, ArtefactRole.FIRMWARE, ArtefactRole.KATA_CONFIG,
    }  # fmt: skip
    shim = built.payload / "bin/containerd-shim-contrast-cc-v2"
    assert shim.read_bytes() == (release / "opt/kata/bin/containerd-shim-kata-v2").read_bytes()
    wrapper = (built.payload / "bin/qemu-system-x86_64-snp-experimental").read_text()
    assert '"$here/qemu-system-x86_64-snp-experimental-wrapped"' in wrapper
    assert '-L "$here/../share/kata-qemu-snp-experimental"' in wrapper
    data = built.payload / "share/kata-qemu-snp-experimental/linuxboot_dma.bin"
    assert data.read_bytes() == b"linuxboot_dma.bin (snp)\n"
    # Files of the release no runtime uses are not in the payload.
    assert not (built.payload / "libexec").exists()
    assert not (built.payload / "share/kata-containers/kata-containers.img").exists()
    # One changed byte in the payload, and the installer refuses it.
    image = built.payload / "share/kata-containers/kata-containers-confidential.img"
    image.write_bytes(b"\x00" + image.read_bytes()[1:])
    with pytest.raises(ArtefactError, match=r"rootfs: .* has sha256"):
        verify_artefacts(description, built.payload)


def test_rebuilding_changes_nothing_and_replaces_the_platform_s_older_runtime(
    release: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    first = build(release, "metal-qemu-snp", workspace, max_vcpus=1)
    build(release, "metal-qemu-tdx", workspace)
    before = snapshot(workspace)
    assert build(release, "metal-qemu-snp", workspace, max_vcpus=1).handler == first.handler
    assert snapshot(workspace) == before
    kernel = release / "opt/kata/share/kata-containers" / synthetic.KERNEL_NAME
    kernel.write_bytes(kernel.read_bytes() + b"\0")
    newer = build(release, "metal-qemu-snp", workspace, max_vcpus=1)
    values = json.loads((workspace / REFERENCE_VALUES).read_text())
    tdx = [key for key in values if key.startswith("contrast-cc-metal-qemu-tdx-")]
    assert sorted(values) == sorted([newer.handler, *tdx])
    assert len(tdx) == 1


def test_resources_name_the_handler_and_validate(release: Path, tmp_path: Path) -> None:
    built = build(
        release, "metal-qemu-snp", tmp_path / "workspace", max_vcpus=1,
        node_selector={"tee": "snp"}, payload_image="registry.example/payload:1",
    )  # fmt: skip
    runtime_class, daemonset = YAML(typ="safe").load_all(built.resources.read_text())
    for document in (runtime_class, daemonset):
        kubernetes_validate.validate(document, "1.33", strict=True)
    assert runtime_class["metadata"]["name"] == runtime_class["handler"] == built.handler
    assert runtime_class["scheduling"] == {"nodeSelector": {"tee": "snp"}}
    pod = daemonset["spec"]["template"]["spec"]
    (installer,) = pod["initContainers"]
    assert installer["image"] == "registry.example/payload:1"
    assert installer["command"][:6] == [
        "contrast", "node-installer", "--host-root", "/host",
        "--payload", f"/usr/share/contrast/runtimes/{built.handler}",
    ]  # fmt: skip
    plain = build(release, "metal-qemu-snp", tmp_path / "plain", max_vcpus=1)
    _, daemonset = YAML(typ="safe").load_all(plain.resources.read_text())
    command = daemonset["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert command[5] == f"/host/var/lib/contrast/payloads/{plain.handler}"


MISSING = [
    ("share/ovmf/AMDSEV.fd", "metal-qemu-snp", "/opt/kata/share/ovmf/AMDSEV.fd"),
    ("share/ovmf/OVMF.inteltdx.fd", "metal-qemu-tdx", "/opt/kata/share/ovmf/OVMF.inteltdx.fd"),
    ("bin/qemu-system-x86_64-snp-experimental", "metal-qemu-snp", "qemu-system-x86_64-snp-exp"),
    ("share/kata-qemu-tdx-experimental", "metal-qemu-tdx", "QEMU data directory"),
    ("bin/containerd-shim-kata-v2", "metal-qemu-tdx", "containerd-shim-kata-v2"),
    (f"share/kata-containers/{synthetic.KERNEL_NAME}", "k3s-qemu-snp", "vmlinuz-confidential"),
    (f"share/kata-containers/{synthetic.IMAGE_NAME}", "metal-qemu-tdx", "confidential.img"),
    ("share/defaults/kata-containers/configuration-qemu-tdx.toml", "k3s-qemu-tdx", "qemu-tdx.toml"),
]


@pytest.mark.parametrize(("missing", "platform", "named"), MISSING, ids=[m[0] for m in MISSING])
def test_a_missing_file_is_named_and_nothing_is_written(
    missing: str, platform: str, named: str, release: Path, tmp_path: Path
) -> None:
    target = release / "opt/kata" / missing
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / REFERENCE_VALUES).write_text("{}\n")
    before = snapshot(workspace)
    with pytest.raises(KataReleaseError) as raised:
        build(release, platform, workspace)
    assert named in raised.value.explain()
    assert snapshot(workspace) == before
    # The same from the tarball: its unpacked scratch copy is gone too.
    tree = {
        name: content
        for name, content in synthetic.files().items()
        if name != missing and not name.startswith(f"{missing}/")
    }
    tarball = synthetic.tarball(tree, tmp_path / "kata-static.tar.zst", "zst")
    with pytest.raises(KataReleaseError, match=named.replace(".", r"\.")):
        build(tarball, platform, workspace)
    assert snapshot(workspace) == before


def test_the_cli_names_the_platform_that_cannot_be_built(
    release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = tmp_path / "workspace"
    argv = ["runtime", "build", "--kata-release", str(release), "--output", str(workspace)]
    assert main([*argv, "--platform", "metal-qemu-snp-gpu"]) == 1
    err = capsys.readouterr().err
    assert "configuration-qemu-nvidia-gpu-snp.toml" in err
    assert "Metal-QEMU-SNP-GPU cannot be built" in err
    assert len(err.strip().splitlines()) == 1
    assert main([*argv, "--platform", "aks-clh-snp"]) == 1
    assert "IGVM" in capsys.readouterr().err
    assert not (workspace / REFERENCE_VALUES).exists()
    assert main([*argv, "--platform", "metal-qemu-snp", "--max-vcpus", "1"]) == 0
    out, err = capsys.readouterr()
    assert "runtime contrast-cc-metal-qemu-snp-" in out
    assert "MinimumTCB" in err
    broken = tmp_path / "broken.tar.zst"
    broken.write_bytes(b"\x28\xb5\x2f\xfd not really zstd")
    assert main([*argv[:2], "--kata-release", str(broken), "--platform", "metal-qemu-tdx"]) == 1
    assert "not a readable Kata release tarball" in capsys.readouterr().err


def test_a_tarball_that_leaves_its_tree_is_refused(tmp_path: Path) -> None:
    tree = synthetic.files()
    tree["bin/kata-runtime"] = "/usr/bin/evil"  # an absolute symlink
    tarball = synthetic.tarball(tree, tmp_path / "kata-static.tar.xz", "xz")
    with pytest.raises(KataReleaseError, match="bin/kata-runtime is a symlink to /usr/bin/evil"):
        build(tarball, "metal-qemu-snp", tmp_path / "workspace")
    assert list((tmp_path / "workspace").iterdir()) == []
