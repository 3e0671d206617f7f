"""A workspace for `contrast generate`: resources, the Coordinator, images, reference values.

Images come from an OCI image layout the tests build (air-gapped use, as `--oci-layout`), named by
`org.opencontainers.image.ref.name` exactly as the examples write them. Real platforms need
reference values that a release build would embed; the tests write such a file with entries of
the verifier's format (their measurements are made up: nothing is attested here).
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from contrast.attestation.snp.reference import SnpReferenceValues
from contrast.attestation.snp.report import Product
from contrast.attestation.tdx.reference import TdxReferenceValues
from contrast.attestation.tee import Tee
from contrast.cli.main import main
from contrast.kuberesource import release
from contrast.platforms import PLATFORMS
from tests.images import imagebuild

EXAMPLES = Path(__file__).parent / "examples"
PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"
USER_IMAGES = (
    "ghcr.io/example/frontend:1.4.2",
    "ghcr.io/example/ledger:2.0.0",
    "ghcr.io/example/exporter:0.3.0",
    "ghcr.io/example/cuda-app:12.4",
    "ghcr.io/example/guestbook:3.1",
)


def root_image(entrypoint: str) -> imagebuild.Image:
    layer = imagebuild.layer(
        [
            imagebuild.directory("etc/"),
            imagebuild.file("etc/passwd", PASSWD),
            imagebuild.file("etc/group", GROUP),
            imagebuild.file(entrypoint.lstrip("/"), "#!/bin/sh\n"),
        ]
    )
    config = {
        "Entrypoint": [entrypoint],
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "WorkingDir": "/app",
    }
    return imagebuild.image([layer], config)


def write_layout(path: Path, names: tuple[str, ...] = USER_IMAGES) -> Path:
    entries: list[tuple[imagebuild.Image | imagebuild.ImageIndex, str | None]] = [
        (root_image(f"/usr/bin/{name.split('/')[-1].split(':')[0]}"), name) for name in names
    ]
    imagebuild.write_layout(path, entries)
    return path


def reference_values_file(path: Path) -> Path:
    """Entries for every real platform, keyed by this release's runtime handlers."""
    document: dict[str, Any] = {}
    for platform in PLATFORMS:
        if platform.emulated:
            continue
        if platform.tee is Tee.SNP:
            snp = SnpReferenceValues(measurements=frozenset({bytes(48)}), product=Product.GENOA)
            entry = {"Platform": platform.display_name, **snp.to_json()}
        else:
            tdx = TdxReferenceValues(mr_td=frozenset({bytes(48)}), rtmrs=(bytes(48),) * 4)
            entry = {"Platform": platform.display_name, **tdx.to_json()}
        document[platform.runtime_class_name] = {platform.tee.value: [entry]}
    path.write_text(json.dumps(document, indent=2))
    return path


@dataclass
class GenerateWorkspace:
    """A workspace directory with `resources/`, an image layout and reference values."""

    root: Path
    layout: Path
    reference_values: Path

    @property
    def resources(self) -> Path:
        return self.root / "resources"

    def add_example(self, name: str) -> None:
        shutil.copytree(EXAMPLES / name, self.resources, dirs_exist_ok=True)

    def add_coordinator(self, platform: str) -> Path:
        text = _capture(["coordinator-resources", "--platform", platform])
        path = self.resources / "coordinator.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def generate(self, *arguments: str) -> int:
        return main(
            [
                "generate",
                "--workspace-dir",
                str(self.root),
                "--oci-layout",
                str(self.layout),
                "--reference-values-file",
                str(self.reference_values),
                *arguments,
            ]
        )

    def documents(self, name: str) -> list[Any]:
        return [d for d in YAML(typ="safe").load_all((self.resources / name).read_text()) if d]

    def manifest(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads((self.root / "manifest.json").read_text())
        return document

    def snapshot(self) -> dict[str, bytes]:
        return {
            str(path.relative_to(self.root)): path.read_bytes()
            for path in sorted(self.root.rglob("*"))
            if path.is_file() and "emulated-tee" not in path.parts
        }


def _capture(argv: list[str]) -> str:
    import contextlib

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(argv) == 0
    return buffer.getvalue()


@pytest.fixture(scope="session")
def image_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_layout(tmp_path_factory.mktemp("layout"))


@pytest.fixture
def workspace(tmp_path: Path, image_layout: Path) -> GenerateWorkspace:
    return GenerateWorkspace(
        root=tmp_path / "workspace",
        layout=image_layout,
        reference_values=reference_values_file(tmp_path / "reference-values.json"),
    )


OWN_IMAGES = (release.COORDINATOR_IMAGE, release.INITIALIZER_IMAGE, release.SERVICE_MESH_IMAGE)
