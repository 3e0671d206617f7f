"""Every YAML the project writes is accepted by the real API server.

`contrast runtime` (every platform, and a `--node-selector`), `runtime build`'s RuntimeClass and
DaemonSet from a Kata release, `contrast coordinator-resources` (every platform on both histories,
more replicas, a namespace) and `contrast generate`'s output for the seeds' examples go through
`kubectl apply --server-side --dry-run=server`: the server's decoding (unknown or duplicate fields
are errors), defaulting, validation and admission, where the schema tests stop at the OpenAPI
document. As a user would, the RuntimeClasses are applied for real first (admission refuses a
Pod whose RuntimeClass does not exist), and so are the namespaces the YAML names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from contrast.history.backends import HistoryBackend
from contrast.platforms import PLATFORMS
from tests.generate.conftest import GenerateWorkspace, reference_values_file, write_layout
from tests.kata import synthetic
from tests.kube.cluster import Cluster
from tests.kube.serviceaccount import cli_output

# The seeds' examples as tests/generate/test_examples.py runs them: (example, coordinator's
# platform, --reference-values).
EXAMPLES = (
    ("multi-runtime", "metal-qemu-snp", "metal-qemu-snp"),
    ("sidecar-tls", "emulated-snp", "emulated-snp"),
    ("gpu", "metal-qemu-snp", "metal-qemu-snp"),
    ("kustomize-app", "emulated-tdx", "emulated-tdx"),
)
RESOURCES = [
    *(["runtime", "--platform", p.name] for p in PLATFORMS),
    ["runtime", "--platform", "metal-qemu-tdx", "--node-selector", "contrast.example/tee=tdx"],
    *(
        ["coordinator-resources", "--platform", p.name, "--history", str(history)]
        for p in PLATFORMS
        for history in HistoryBackend
    ),
    ["coordinator-resources", "--platform", "metal-qemu-snp", "--replicas", "5",
     "--namespace", "contrast-team-a"],
]  # fmt: skip


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe").load_all(text) if d]


def ensure_namespaces(cluster: Cluster, texts: list[str]) -> None:
    """Create, for real, the namespaces the documents name (a dry run creates none)."""
    named = set()
    for text in texts:
        for document in documents(text):
            if document["kind"] == "Namespace":
                named.add(document["metadata"]["name"])
            elif "namespace" in document["metadata"]:
                named.add(document["metadata"]["namespace"])
    for name in sorted(named):
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(namespace).encode())


def dry_run_apply(cluster: Cluster, text: str, where: str) -> None:
    """`kubectl apply --server-side --dry-run=server` of `text` exactly as written: every
    document accepted, none skipped."""
    result = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=contrast-tests",
        "-f", "-", input=text.encode(), check=False,
    )  # fmt: skip
    output = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, f"{where}: {output}"
    applied = [line for line in result.stdout.decode().splitlines() if "(server dry run)" in line]
    assert len(applied) == len(documents(text)), f"{where}: {output}"


@pytest.fixture(scope="module")
def runtime_classes(kube_cluster: Cluster) -> Cluster:
    """Every platform's RuntimeClass, applied for real, as `contrast runtime` prints it."""
    for platform in PLATFORMS:
        text = cli_output("runtime", "--platform", platform.name)
        (runtime_class,) = [d for d in documents(text) if d["kind"] == "RuntimeClass"]
        kube_cluster.kubectl(
            "apply", "--server-side", "-f", "-", input=json.dumps(runtime_class).encode()
        )
    return kube_cluster


@pytest.fixture(scope="module")
def image_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_layout(tmp_path_factory.mktemp("layout"))


@pytest.mark.parametrize("argv", RESOURCES, ids=" ".join)
def test_runtime_and_coordinator_resources_are_accepted(
    argv: list[str], runtime_classes: Cluster
) -> None:
    text = cli_output(*argv)
    ensure_namespaces(runtime_classes, [text])
    dry_run_apply(runtime_classes, text, " ".join(argv))


def test_runtime_build_output_is_accepted(
    runtime_classes: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = synthetic.tarball(
        synthetic.files(), tmp_path / "kata-static-3.99.0-amd64.tar.zst", "zst"
    )
    monkeypatch.chdir(tmp_path)
    cli_output("runtime", "build", "--kata-release", str(release), "--platform", "metal-qemu-snp")
    (written,) = tmp_path.glob("runtime-*.yml")
    text = written.read_text()
    ensure_namespaces(runtime_classes, [text])
    dry_run_apply(runtime_classes, text, written.name)


@pytest.fixture
def workspace(tmp_path: Path, image_layout: Path) -> GenerateWorkspace:
    return GenerateWorkspace(
        root=tmp_path / "workspace",
        layout=image_layout,
        reference_values=reference_values_file(tmp_path / "reference-values.json"),
    )


@pytest.mark.parametrize(("example", "platform", "reference_values"), EXAMPLES)
def test_generated_examples_are_accepted(
    example: str,
    platform: str,
    reference_values: str,
    workspace: GenerateWorkspace,
    runtime_classes: Cluster,
) -> None:
    workspace.add_example(example)
    if example == "kustomize-app":  # as test_examples: the kustomization stays outside
        (workspace.resources / "base").rename(workspace.root / "kustomize-base")
    workspace.add_coordinator(platform)
    assert workspace.generate("--reference-values", reference_values, str(workspace.resources)) == 0
    paths = sorted(workspace.resources.rglob("*.yml"))
    texts = [path.read_text() for path in paths]
    assert len(paths) >= 2, paths  # the example's and the Coordinator's
    ensure_namespaces(runtime_classes, texts)
    for path, text in zip(paths, texts, strict=True):
        dry_run_apply(runtime_classes, text, f"{example}/{path.name}")


def test_a_document_the_api_server_refuses_fails_the_check(runtime_classes: Cluster) -> None:
    """The check can fail: a field the schema does not know is refused by the server."""
    text = cli_output("coordinator-resources", "--platform", "emulated-snp")
    broken = text.replace("kind: StatefulSet\n", "kind: StatefulSet\nreplica: 3\n", 1)
    assert broken != text
    with pytest.raises(AssertionError, match="field not declared in schema"):
        dry_run_apply(runtime_classes, broken, "broken")
