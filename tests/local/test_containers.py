"""The release images under a real containerd with runc: the demo's flow, and what ran.

The images are pushed with skopeo into Debian's docker-registry on loopback and pulled by digest
by a containerd of the test's own; the Coordinator, the Initializers and the service-mesh proxies
run as containers on the host network with the emulated TEE's state mounted in. containerd must
start here (as root): when it cannot, the test fails.
"""

from __future__ import annotations

from typing import Any

import pytest

from contrast.local.demo import Demo
from tests.imagebuild.builder import BuiltImages


class RecordingDemo(Demo):
    """The demo, keeping the OCI spec containerd handed runc for each container."""

    specs: dict[str, dict[str, Any]]

    def run(self) -> None:
        try:
            super().run()
        finally:
            runner = self.components
            self.specs = dict(getattr(runner, "containerd").specs)  # noqa: B009


@pytest.fixture(scope="module")
def container_demo(
    built_images: BuiltImages, tmp_path_factory: pytest.TempPathFactory
) -> tuple[RecordingDemo, list[str]]:
    lines: list[str] = []
    workdir = tmp_path_factory.mktemp("container-demo")
    demo = RecordingDemo(workdir, lines.append, images=built_images.layout)
    demo.run()
    return demo, lines


def test_the_demo_flow_runs_on_the_release_images(
    container_demo: tuple[RecordingDemo, list[str]],
) -> None:
    demo, lines = container_demo
    text = "\n".join(lines)
    assert "pulled by digest" in lines[0]
    assert "over mutual TLS: HTTP 200: hello from web" in text
    assert "a client without a mesh certificate is refused: refused" in text
    assert "comes back in recovery mode" in text
    assert "chains to the root CA saved by verify before the restart" in text
    # Every component really ran in a container of its image.
    assert {"coordinator-0", "initializer-web", "initializer-client", "sidecar-web"} <= set(
        demo.specs
    )


def test_containerd_ran_the_images_programs_as_their_configs_say(
    container_demo: tuple[RecordingDemo, list[str]],
) -> None:
    demo, _ = container_demo
    for name, spec in demo.specs.items():
        process = spec["process"]
        assert process["args"][0] == "contrast", name
        assert process["user"]["uid"] == 0
        assert process["cwd"] == "/"
        assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in process["env"]
        assert spec["root"]["path"] == "rootfs"
    assert demo.specs["sidecar-web"]["process"]["args"][1:3] == ["servicemesh", "run"]
