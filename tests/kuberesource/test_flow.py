"""The resource steps of `generate`, composed as the pipeline does: a second run changes nothing."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from contrast.kuberesource import checks, inject, pinning, runtimeclass, yamlio
from contrast.kuberesource.checks import is_own_image
from contrast.platforms import by_name

from .builders import validate

TESTDATA = Path(__file__).parent / "testdata"
DEFAULT = by_name("metal-qemu-tdx")


def digest(image: str) -> str:
    """A stand-in resolver: pinned images resolve to their digest, others to a made-up one."""
    return pinning.split_digest(image)[1] or "sha256:" + hashlib.sha256(image.encode()).hexdigest()


def run(directory: Path) -> list[Path]:
    """One pass over a directory; returns the files written."""
    files = yamlio.load_paths([directory])
    everything = [w for file in files for w in file.workloads()]
    namespace = inject.coordinator_namespace(everything)
    for choice in runtimeclass.resolve_all(everything, DEFAULT):
        if choice.platform is None:
            continue
        runtimeclass.set_runtime_class(choice.workload, choice.platform)
        inject.inject(choice.workload, coordinator_namespace=namespace)
        images = [c["image"] for c in choice.workload.all_containers()]
        pinning.pin_images(choice.workload, {i: digest(i) for i in images if not is_own_image(i)})
        assert checks.check_image_pinning(choice.workload) == []
    for file in files:
        for document in file.documents:
            if document is not None:
                validate(document)
    return [file.path for file in files if file.write()]


def test_second_run_changes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "resources"
    shutil.copytree(TESTDATA, directory)
    untouched = (directory / "kustomize-build.yml").read_text().replace("contrast-cc", "runc")
    (directory / "no-confidential-pods.yml").write_text(untouched)
    written = run(directory)
    assert sorted(path.name for path in written) == [
        "gpu-pod.yml", "helm-template.yaml", "kustomize-build.yml", "multi-runtime.yml",
    ]  # fmt: skip
    after_first = {path: path.read_bytes() for path in sorted(directory.iterdir())}
    assert run(directory) == []
    assert {path: path.read_bytes() for path in sorted(directory.iterdir())} == after_first
    assert (directory / "no-confidential-pods.yml").read_text() == untouched
    text = (directory / "multi-runtime.yml").read_text()
    assert text.startswith("# One set of resources, three platforms")
    assert "coordinator-ready.contrast" in text
