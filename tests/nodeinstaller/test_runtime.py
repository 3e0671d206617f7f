"""Runtime descriptions and the content-derived runtime hash that names the runtime class."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from contrast.nodeinstaller.standins import describe_standins, write_standins
from contrast.platforms import PLATFORMS, Platform, by_name, from_runtime_class, runtime_hash
from contrast.runtimedescription.digest import runtime_digest, runtime_hash_of
from contrast.runtimedescription.errors import RuntimeDescriptionError
from contrast.runtimedescription.model import parse_runtime
from contrast.runtimedescription.shipped import load_runtime
from tests.nodeinstaller.conftest import build_runtime

DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
INSTALLER = "0" * 64


@pytest.mark.parametrize("platform", PLATFORMS, ids=lambda p: p.name)
def test_runtime_class_names_are_content_derived_dns_labels(platform: Platform) -> None:
    name = platform.runtime_class_name
    assert DNS_1123_LABEL.fullmatch(name)
    assert len(name) <= 63
    assert name == f"contrast-cc-{platform.name}-{runtime_hash_of(load_runtime(platform.name))}"
    assert from_runtime_class(name) is platform


def test_names_differ_per_platform() -> None:
    names = {platform.runtime_class_name for platform in PLATFORMS}
    hashes = {runtime_hash(platform) for platform in PLATFORMS}
    assert len(names) == len(hashes) == len(PLATFORMS)


def test_any_changed_input_changes_the_hash(tmp_path: Path) -> None:
    built = build_runtime(by_name("metal-qemu-tdx"), tmp_path)
    description = built.description
    original = runtime_hash_of(description, INSTALLER)
    rootfs = description.artefacts[2]
    assert rootfs.name == "rootfs"
    variants = {
        "digest": replace(rootfs, sha256="f" * 64),
        "size": replace(rootfs, size=rootfs.size + 1),
        "mode": replace(rootfs, executable=True),
        "path": replace(rootfs, path=rootfs.path.replace("kata-containers.img", "rootfs.img")),
    }
    seen = {original}
    for changed in variants.values():
        artefacts = (*description.artefacts[:2], changed, *description.artefacts[3:])
        other = runtime_hash_of(replace(description, artefacts=artefacts), INSTALLER)
        assert other not in seen
        seen.add(other)
    kernel = replace(description, kernel_params="console=ttyS0")
    assert runtime_hash_of(kernel, INSTALLER) not in seen
    assert runtime_hash_of(description, "1" * 64) not in seen
    # The hash does not depend on the order the artefacts are listed in: the lines are sorted.
    reversed_order = replace(description, artefacts=description.artefacts[::-1])
    assert runtime_digest(reversed_order, INSTALLER) == runtime_digest(description, INSTALLER)


def test_rebuilt_artefacts_give_another_name(tmp_path: Path) -> None:
    platform = by_name("metal-qemu-snp")
    first = build_runtime(platform, tmp_path / "a")
    second = build_runtime(platform, tmp_path / "b", salt="patched kernel")
    assert first.name != second.name
    assert from_runtime_class(first.name) is from_runtime_class(second.name) is platform


@pytest.mark.parametrize("platform", PLATFORMS, ids=lambda p: p.name)
def test_committed_descriptions_are_reproducible_from_the_standins(
    platform: Platform, tmp_path: Path
) -> None:
    write_standins(platform, tmp_path)
    assert describe_standins(platform, tmp_path) == load_runtime(platform.name)
    shipped = Path(__file__).parents[2] / "src/contrast/runtimedescription/runtimes"
    text = (shipped / f"{platform.name}.json").read_text()
    assert describe_standins(platform, tmp_path).to_json() == text


def _description_json(tmp_path: Path) -> dict[str, object]:
    data = json.loads(build_runtime(by_name("metal-qemu-snp"), tmp_path).description.to_json())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d["artefacts"][0].update(url="https://x"), "url"),
        (lambda d: d["artefacts"][0].update(sha256="ABC"), "64 lower-case hex"),
        (lambda d: d["artefacts"][0].update(path="/usr/bin/shim"), "is not under"),
        (
            lambda d: d["artefacts"][0].update(path="/opt/edgeless/@@runtimeName@@/bin/../x"),
            "normalised",
        ),
        (lambda d: d["artefacts"][1].update(name="containerd-shim"), "more than once"),
        (lambda d: d["artefacts"][1].update(role="shim"), "role 'shim'"),
        (lambda d: d["artefacts"].pop(0), "no artefact with role 'shim'"),
        (lambda d: d.update({"kata-config": None}), "kata-config"),
        (lambda d: d["artefacts"][0].update(size=-1), "greater than or equal"),
        (lambda d: d.update(format=2), "format"),
    ],
)
def test_malformed_descriptions_are_refused(tmp_path: Path, change: object, message: str) -> None:
    data = _description_json(tmp_path)
    assert callable(change)
    change(data)
    with pytest.raises(RuntimeDescriptionError, match=re.escape(message)):
        parse_runtime(json.dumps(data), source="test.json")


def test_a_path_that_is_also_a_directory_is_refused(tmp_path: Path) -> None:
    data = _description_json(tmp_path)
    artefacts = data["artefacts"]
    assert isinstance(artefacts, list)
    artefacts[1]["path"] = artefacts[0]["path"] + "/inner"
    with pytest.raises(RuntimeDescriptionError, match="also a directory"):
        parse_runtime(json.dumps(data), source="test.json")


def test_unknown_platform_has_no_description() -> None:
    with pytest.raises(RuntimeDescriptionError, match="no runtime description"):
        load_runtime("metal-qemu-sev")
