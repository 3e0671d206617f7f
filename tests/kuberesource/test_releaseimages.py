"""The release images' record: references by digest in a release, by tag in a source tree."""

from __future__ import annotations

import dataclasses

import pytest

from contrast.cli.main import main
from contrast.generate.release_images import known_images
from contrast.kuberesource.releaseimages import (
    NAMES,
    SOURCE_BUILD_NOTE,
    pinned,
    release_images,
    tagged,
)

DIGEST = "sha256:" + "ab" * 32


def test_a_recorded_digest_pins_the_reference() -> None:
    image = release_images()["coordinator"]
    assert image.reference == tagged("coordinator")
    pinned_image = dataclasses.replace(image, digest=DIGEST)
    assert pinned_image.reference == f"ghcr.io/contrast-python/coordinator:0.1.0@{DIGEST}"
    assert pinned_image.facts(pinned_image.reference).digest == DIGEST


def test_the_source_tree_records_every_image_without_digests() -> None:
    assert set(release_images()) == set(NAMES)
    assert not pinned()
    for image in release_images().values():
        assert image.digest is None
        assert image.config.entrypoint is not None
        assert image.config.entrypoint == ("/usr/local/bin/contrast",)
        assert image.config.user == "0:0"


def test_generate_takes_the_policy_images_facts_from_the_record() -> None:
    known = known_images()
    for name in ("coordinator", "initializer", "service-mesh-proxy"):
        facts = known[tagged(name)]
        assert facts.config == release_images()[name].config
        assert facts.etc_passwd == release_images()[name].etc_passwd
    assert tagged("node-installer") not in known  # it runs outside confidential pods


@pytest.mark.parametrize("command", [["runtime"], ["coordinator-resources"]])
def test_release_yaml_of_a_source_tree_says_it_is_named_by_tag(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--platform", "metal-qemu-snp"]) == 0
    captured = capsys.readouterr()
    assert captured.err.strip() == SOURCE_BUILD_NOTE
    assert "note:" not in captured.out
    assert "ghcr.io/contrast-python/" in captured.out
