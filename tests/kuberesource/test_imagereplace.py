"""`--image-replacements`: the file format, its errors, and replacement in every workload kind."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from contrast.errors import ContrastError
from contrast.kuberesource.imagereplace import (
    MAX_FILE_BYTES,
    ImageReplacementError,
    ImageReplacements,
)
from contrast.kuberesource.workloads import Workload

from .builders import KINDS, pod_spec, resource, validate

OLD = "ghcr.io/example/app:v1"
NEW = "mirror.example:5000/example/app:v1"


def test_pairs_comments_and_blank_lines() -> None:
    text = (
        "# written by the mirror job\n"
        "\n"
        "   \n"
        f"{OLD}={NEW}\n"
        "  # indented comment: a=b is no pair here\n"
        "nginx = mirror.example/library/nginx:1.27   # spaces around = and a trailing comment\n"
        "busybox@sha256:" + "a" * 64 + "=mirror.example/busybox@sha256:" + "a" * 64 + "\n"
        "unchanged:1=unchanged:1\n"
    )
    replacements = ImageReplacements.from_text(text, "r.txt")
    assert replacements.table == {
        OLD: NEW,
        "nginx": "mirror.example/library/nginx:1.27",
        "busybox@sha256:" + "a" * 64: "mirror.example/busybox@sha256:" + "a" * 64,
        "unchanged:1": "unchanged:1",
    }
    assert replacements
    assert not ImageReplacements.from_text("# nothing\n\n")
    assert not ImageReplacements()


def test_the_same_pair_twice_is_fine() -> None:
    assert ImageReplacements.from_text(f"{OLD}={NEW}\n{OLD} = {NEW}\n").table == {OLD: NEW}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nginx\n", "r.txt:1: 'nginx' is not IMAGE=REPLACEMENT"),
        (f"# c\n={NEW}\n", "r.txt:2: no image before '='"),
        (f"{OLD}=\n", f"r.txt:1: no replacement for {OLD!r}"),
        (f"{OLD} =   # gone\n", f"r.txt:1: no replacement for {OLD!r}"),
        (f"{OLD}={NEW} extra\n", "r.txt:1: '"),
        (f"x {OLD}={NEW}\n", "r.txt:1: 'x "),
        (f"{OLD}={NEW}={NEW}\n", "is not one IMAGE=REPLACEMENT pair"),
        (f"{OLD}=Mirror.example/UPPER:v1\n", "r.txt:1: replacement image reference"),
        (f"ghcr.io/a b:c={NEW}\n", "r.txt:1: '"),
        (f"{OLD}:tag:more={NEW}\n", "r.txt:1: image image reference"),
        (
            f"{OLD}={NEW}\n\n{OLD}=other.example/app:v1\n",
            f"r.txt:3: {OLD!r} is replaced by 'other.example/app:v1' here but by {NEW!r} on line 1",
        ),
        (
            f"{OLD}={NEW}\n{NEW}=other.example/app:v1\n",
            f"r.txt:1: {NEW!r} replaces {OLD!r} and is itself replaced on line 2",
        ),
        ("a:1=b:1\nb:1=a:1\n", "r.txt:1: 'b:1' replaces 'a:1' and is itself replaced on line 2"),
    ],
)
def test_malformed_lines_are_refused_with_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ImageReplacementError) as raised:
        ImageReplacements.from_text(text, "r.txt")
    assert isinstance(raised.value, ContrastError)
    explained = raised.value.explain()
    assert message in explained
    assert "\n" not in explained


def test_from_file(tmp_path: Path) -> None:
    path = tmp_path / "replacements.txt"
    path.write_text(f"{OLD}={NEW}\n")
    assert ImageReplacements.from_file(path).table == {OLD: NEW}
    path.write_text(f"{OLD}\n")
    with pytest.raises(ImageReplacementError, match=f"^{path}:1: "):
        ImageReplacements.from_file(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the image replacements"),
        (b"\xff\xfe=x\n", r"are not UTF-8 \(byte 0\)"),
        (b"#" * (MAX_FILE_BYTES + 1), f"larger than {MAX_FILE_BYTES} bytes"),
    ],
)
def test_unreadable_files(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "replacements.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ImageReplacementError, match=message):
        ImageReplacements.from_file(path)


def _every_container_kind() -> dict[str, object]:
    spec = pod_spec(
        initContainers=[
            {"name": "setup", "image": OLD},
            {"name": "sidecar", "image": "ghcr.io/example/sidecar:v1", "restartPolicy": "Always"},
        ]
    )
    spec["containers"].append({"name": "other", "image": "ghcr.io/example/other:v1"})
    return spec


@pytest.mark.parametrize("kind", KINDS)
def test_every_container_of_every_kind_is_replaced(kind: str) -> None:
    document = resource(kind, _every_container_kind())
    untouched = copy.deepcopy(document)
    replacements = ImageReplacements.from_text(
        f"{OLD}={NEW}\nghcr.io/example/sidecar:v1=mirror.example/sidecar:v1\n"
        "ghcr.io/example/unused:v1=mirror.example/unused:v1\n"
    )
    assert replacements.replace_all([document, {"kind": "Service"}])
    validate(document)
    workload = Workload(document)
    assert [c["image"] for c in workload.all_containers()] == [
        NEW,
        "mirror.example/sidecar:v1",
        NEW,
        "ghcr.io/example/other:v1",
    ]
    assert not replacements.replace_all([document])  # once only: running it again changes nothing
    assert not ImageReplacements().replace_all([untouched])
    assert untouched == resource(kind, _every_container_kind())


def test_ephemeral_containers_and_lists() -> None:
    pod = resource("Pod")
    pod["spec"]["ephemeralContainers"] = [{"name": "debug", "image": OLD}]
    deployment = resource("Deployment")
    replacements = ImageReplacements.from_text(f"{OLD}={NEW}\n")
    assert replacements.replace_all([{"apiVersion": "v1", "kind": "List", "items": [pod]}])
    assert pod["spec"]["ephemeralContainers"][0]["image"] == NEW
    assert pod["spec"]["containers"][0]["image"] == NEW
    replacements.replace_in(Workload(deployment))
    assert Workload(deployment).containers()[0]["image"] == NEW


def test_only_whole_strings_match() -> None:
    document = resource("Deployment")
    Workload(document).containers()[0]["image"] = f"{OLD}@sha256:{'b' * 64}"
    replacements = ImageReplacements.from_text(f"{OLD}={NEW}\nghcr.io/example/app={NEW}\n")
    assert not replacements.replace_all([document])
    assert Workload(document).containers()[0]["image"] == f"{OLD}@sha256:{'b' * 64}"
