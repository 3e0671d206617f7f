"""examples/emojivoto on the real cluster under the emulated confidential runtime, as users run it.

The example's YAML as it is, its upstream images mapped with `--image-replacements` to images of
our own for emojivoto's four roles (tests/examples/emojivoto_standin.py: plain HTTP behind the
sidecars, on the same ports and environment as upstream's), built as the mesh-app example's image
is (the release images' Python base layer plus one layer) and pushed by digest; this checkout's
release images pushed likewise; the emulated runtime installed (`cluster.sh install-runtime`);
`coordinator-resources`, `generate`, `kubectl apply`, `contrast set` through the port-forwarder.
Then the app works only if the mesh the annotations ask for does: vote-bot reaches web through
its egress listener (mutual TLS to web's sidecar), web reaches emoji-svc and voting-svc through
its own egress listeners (mutual TLS: their sidecars accept nothing else), and vote-bot's log
shows votes counted in voting-svc's leaderboard.

MySQL and the Vault are not run here: their volume claim templates need a storage class that
provisions `Block` volumes, which the test cluster has not (tests/examples deploys them as the
demo runs workloads).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contrast.cli.main import main
from contrast.imagebuild.cli import DEFAULT_EPOCH
from contrast.imagebuild.layer import Entry, write_layer
from contrast.imagebuild.oci import LayoutWriter
from contrast.imagebuild.spec import ImageSpec
from contrast.images.manifest import REF_NAME_ANNOTATION
from contrast.local.kubecluster import push_image
from tests.examples.conftest import EXAMPLES, IMAGES
from tests.kube import deploy, flow
from tests.kube.cluster import SCRIPT, Cluster

PLATFORM = "emulated-snp"
STANDIN = Path(__file__).parents[1] / "examples" / "emojivoto_standin.py"
ROLES = ("emoji-svc", "voting-svc", "web", "vote-bot")
# The image of each upstream role image, by its program (web's image also runs the vote-bot).
IMAGE_ROLES = {"emoji-svc": "emoji-svc", "voting-svc": "voting-svc", "web": "web"}
COORDINATOR_SELECTOR = "app.kubernetes.io/name=coordinator"
READY_TIMEOUT = 300


@dataclass(frozen=True)
class RoleSpec(ImageSpec):
    """An image whose entrypoint is one role's program."""

    program: str = ""

    @property
    def entrypoint(self) -> tuple[str, ...]:
        return (self.program,)


def build_role_images(release: Path, output: Path) -> dict[str, str]:
    """The three images into one layout; {upstream image: reference in the layout}."""
    base = flow.build_image_module().base_layer(release)
    script = STANDIN.read_bytes()
    programs = write_layer(
        [Entry.file(f"/usr/local/bin/emojivoto-{role}", script, 0o755) for role in ROLES],
        DEFAULT_EPOCH,
    )
    writer = LayoutWriter(output)
    references = {}
    for upstream, (name, _) in IMAGES.items():
        role = name.partition(":")[0]
        if role not in IMAGE_ROLES:
            continue
        spec = RoleSpec(role, "python", "", (), program=f"/usr/local/bin/emojivoto-{role}")
        writer.image(spec, [base, programs], epoch=DEFAULT_EPOCH)
        _, descriptor = writer.images[-1]
        descriptor["annotations"][REF_NAME_ANNOTATION] = f"example.test/emojivoto/{name}"
        references[upstream] = f"example.test/emojivoto/{name}"
    writer.finish()
    return references


@dataclass
class Deployment:
    cluster: Cluster
    namespace: str
    workspace: Path
    resources: Path
    coordinator_image: str

    def cli(self, *arguments: str) -> None:
        if main(list(arguments)):
            pytest.fail(
                f"contrast {' '.join(arguments)} failed (its error above)\n"
                + deploy.describe(self.cluster, self.namespace)
            )


def _capture_cli(*arguments: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(arguments))
    assert code == 0, f"contrast {' '.join(arguments)} exited {code}"
    return out.getvalue()


@pytest.fixture(scope="module")
def emojivoto(
    kube_cluster: Cluster, release_layout: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    cluster = kube_cluster
    root = tmp_path_factory.mktemp("emojivoto")
    installed = subprocess.run(
        ["bash", str(SCRIPT), "install-runtime", str(cluster.directory), PLATFORM, sys.executable],
        capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    if installed.returncode:
        pytest.fail(f"cluster.sh install-runtime failed:\n{installed.stderr.decode()[-4000:]}")
    namespace = cluster.namespace("emojivoto")
    replacements = deploy.push_release(release_layout, cluster.registry, root)
    layout = root / "emojivoto-images"
    for upstream, reference in build_role_images(release_layout, layout).items():
        name = reference.rpartition("/")[2]
        pushed = push_image(layout, reference, f"{cluster.registry}/emojivoto/{name}", root)
        with replacements.open("a") as lines:
            lines.write(f"{upstream}={pushed}\n")
    workspace = root / "workspace"
    resources = workspace / "resources"
    resources.mkdir(parents=True)
    shutil.copy(EXAMPLES / "emojivoto" / "emojivoto.yml", resources / "emojivoto.yml")
    (resources / "coordinator.yml").write_text(_capture_cli(
        "coordinator-resources", "--platform", PLATFORM, "--namespace", namespace,
        "--image-replacements", str(replacements),
    ))  # fmt: skip
    roots = flow.node_public_roots(root / "node-roots")
    (coordinator_image,) = [
        line.partition("=")[2]
        for line in replacements.read_text().splitlines()
        if line.startswith(f"{deploy.RELEASE_PREFIX}coordinator:")
    ]
    app = Deployment(cluster, namespace, workspace, resources, coordinator_image)
    app.cli(
        "generate", "--workspace-dir", str(workspace), "--reference-values", PLATFORM,
        "--emulated-tee", str(roots), "--image-replacements", str(replacements),
        "--insecure-registry", cluster.registry, str(resources),
    )  # fmt: skip
    try:
        cluster.kubectl("-n", namespace, "apply", "-f", str(resources))
        yield app
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_emojivoto_votes_cross_the_mesh(emojivoto: Deployment) -> None:
    app = emojivoto
    cluster, namespace = app.cluster, app.namespace
    deploy.wait_started(cluster, namespace, COORDINATOR_SELECTOR, 3, READY_TIMEOUT)
    forwarder = deploy.forwarder_pod(namespace, app.coordinator_image)
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=deploy.dump([forwarder]))
    deploy.wait_ready(cluster, namespace, f"app.kubernetes.io/name={deploy.FORWARDER_NAME}", 1, 120)
    with deploy.port_forward(
        cluster, namespace, f"pod/{deploy.FORWARDER_NAME}", deploy.USER_API_PORT
    ) as port:
        app.cli("set", "-c", f"127.0.0.1:{port}", "--workspace-dir", str(app.workspace),
                str(app.resources))  # fmt: skip
    for selector in ("emoji-svc", "voting-svc", "web-svc", "vote-bot"):
        deploy.wait_ready(
            cluster, namespace, f"app.kubernetes.io/name={selector}", 1, READY_TIMEOUT
        )
    deadline = time.monotonic() + 180
    log = ""
    while time.monotonic() < deadline:
        log = cluster.kubectl(
            "-n", namespace, "logs", "deployment/vote-bot", "-c", "vote-bot", check=False
        ).stdout.decode(errors="replace")
        counted = [line for line in log.splitlines() if line.startswith("voted ")]
        if len(counted) >= 3:
            # The third vote's leaderboard holds the votes of the rounds before it.
            assert '"voted":' in counted[-1]
            assert "leaderboard {" in counted[-1]
            assert counted[-1].rpartition("leaderboard ")[2] != "{}"
            print(f"vote-bot: {counted[-1]}")
            return
        time.sleep(3)
    pytest.fail(f"vote-bot counted no votes through the mesh:\n{log[-3000:]}\n"
                + deploy.describe(cluster, namespace))  # fmt: skip
