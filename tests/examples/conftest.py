"""Stand-in images for the examples, a generate workspace, and generate with the replacements."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.generate.conftest import GROUP, GenerateWorkspace, reference_values_file
from tests.images import imagebuild

EXAMPLES = Path(__file__).parents[2] / "examples"
MIRROR = "registry.test:5000/contrast-examples"
EMOJIVOTO = "docker.io/buoyantio/emojivoto-{}:v11@sha256:{}"
MYSQL = (
    "docker.io/library/mysql:9.1.0"
    "@sha256:0255b469f0135a0236d672d60e3154ae2f4538b146744966d96440318cc822c6"
)
OPENBAO = "quay.io/openbao/openbao:2.2.0"
# Upstream image -> (stand-in name, its entrypoint); the stand-ins are the test's own.
IMAGES = {
    EMOJIVOTO.format(
        "emoji-svc", "957949355653776b65fafc2ee22f737cd21e090d4ace63f3b99f6e16976f0458"
    ): ("emoji-svc:v11", ["/usr/local/bin/emojivoto-emoji-svc"]),
    EMOJIVOTO.format(
        "voting-svc", "a57ac67af7a5b05988a38b49568eca6a078ef27a71c148c44c9db4efb1dac58b"
    ): ("voting-svc:v11", ["/usr/local/bin/emojivoto-voting-svc"]),
    EMOJIVOTO.format("web", "d21f9fdb794f754b076344ce01c4858c499617c952cc6a941ac3cefbf5ccedfd"): (
        "web:v11",
        ["/usr/local/bin/emojivoto-web"],
    ),
    MYSQL: ("mariadb:10.11", ["/usr/local/bin/docker-entrypoint.sh", "mysqld"]),
    OPENBAO: ("openbao:2.2.0", ["/usr/local/bin/docker-entrypoint.sh", "server", "-dev"]),
}
PASSWD = "root:x:0:0:root:/root:/bin/sh\nmysql:x:999:999::/var/lib/mysql:/bin/false\n"


def _stand_in(entrypoint: list[str]) -> imagebuild.Image:
    layer = imagebuild.layer(
        [
            imagebuild.directory("etc/"),
            imagebuild.file("etc/passwd", PASSWD),
            imagebuild.file("etc/group", GROUP),
            imagebuild.file("bin/sh", "#!/bin/sh\n"),
            imagebuild.file(entrypoint[0].lstrip("/"), "#!/bin/sh\n"),
        ]
    )
    config = {
        "Entrypoint": entrypoint[:1],
        "Cmd": entrypoint[1:] or None,
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "WorkingDir": "/",
    }
    return imagebuild.image([layer], config)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("example-images")
    imagebuild.write_layout(
        path,
        [(_stand_in(entry), f"{MIRROR}/{name}") for name, entry in IMAGES.values()],
    )
    return path


@pytest.fixture
def workspace(tmp_path: Path, layout: Path) -> GenerateWorkspace:
    return GenerateWorkspace(
        root=tmp_path / "workspace",
        layout=layout,
        reference_values=reference_values_file(tmp_path / "reference-values.json"),
    )


def replacements_file(path: Path) -> Path:
    lines = [f"{image}={MIRROR}/{name}" for image, (name, _) in IMAGES.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def generated(workspace: GenerateWorkspace, example: str, *flags: str) -> int:
    shutil.copytree(EXAMPLES / example, workspace.resources, dirs_exist_ok=True)
    workspace.add_coordinator("emulated-snp")
    replacements = replacements_file(workspace.root.parent / "replacements.txt")
    return workspace.generate(
        "--reference-values", "emulated-snp", "--image-replacements", str(replacements),
        *flags, str(workspace.resources),
    )  # fmt: skip
