"""`set`'s policy reading (libyaml and generate's memo) finds what ruamel's safe loader found.

The reference is the reader `collect_policies` had before (ruamel's safe loader on every file,
within `yamlbounds`), kept here: on the seeds' examples and on every kind that carries pods
(Deployment, StatefulSet, DaemonSet, Job, CronJob, Pod, a List, several documents in a file,
comments, anchors and aliases, YAML 1.1/1.2 look-alikes that `yamlfast` declines), both give
the same policies; malformed YAML, an alias bomb, self-reference and deep nesting give the same
refusal; and a memo entry is taken only for exactly the bytes it was made from.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml.error import YAMLError

from contrast.boundedfile import read_bounded
from contrast.client import resources
from contrast.client.resources import ResourceFileUnreadable, collect_policies
from contrast.errors import ContrastError
from contrast.kuberesource import yamlbounds, yamlio
from contrast.kuberesource.yamlmemo import YamlMemo
from contrast.policy.cache import PolicyCache, written_annotations
from contrast.policy.initdata import (
    ANNOTATION,
    InitdataError,
    decode_annotation,
    encode_policy,
    policy_hash,
)
from contrast.policy.settings import default_settings
from tests.generate.conftest import GenerateWorkspace, reference_values_file, write_layout

EXAMPLES = Path(__file__).resolve().parents[1] / "generate" / "examples"


def reference(directory: Path) -> dict[str, bytes]:
    """`collect_policies` as it was: ruamel's safe loader on every file."""
    policies: dict[str, bytes] = {}
    for path in resources.yaml_files(directory):
        try:
            data = read_bounded(path, yamlbounds.MAX_FILE_BYTES, what="the resource file")
            documents = yamlbounds.load_all_safe(data.decode(), str(path))
        except (OSError, YAMLError, UnicodeDecodeError) as error:
            raise ResourceFileUnreadable(f"cannot read {path}: {error}") from None
        for document in documents:
            for value in resources._annotation_values(document):
                toml = decode_annotation(value)
                policies[policy_hash(toml).hex()] = toml
    return policies


def annotation(name: str) -> str:
    return encode_policy(f"package agent_policy\n# {name}\ndefault AllowAll := true\n").annotation


def pod_spec(indent: str) -> str:
    return f"{indent}containers:\n{indent}  - name: app\n{indent}    image: nginx:1.27\n"


def template(name: str, indent: str) -> str:
    return (
        f"{indent}template:\n{indent}  metadata:\n{indent}    annotations:\n"
        f"{indent}      {ANNOTATION}: {annotation(name)}\n{indent}  spec:\n"
        + pod_spec(indent + "    ")
    )


def controller(kind: str, name: str) -> str:
    api = "batch/v1" if kind == "Job" else "apps/v1"
    return f"apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n" + template(
        name, "  "
    )


CASES: dict[str, str] = {
    **{
        f"{kind.lower()}.yml": controller(kind, kind.lower())
        for kind in ("Deployment", "StatefulSet", "DaemonSet", "Job")
    },
    "cronjob.yaml": (
        "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: cron\nspec:\n"
        "  schedule: '*/5 * * * *'\n  jobTemplate:\n    spec:\n" + template("cron", "      ")
    ),
    "pod.yml": (
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: pod\n  annotations:\n"
        f'    {ANNOTATION}: "{annotation("pod")}"\nspec:\n' + pod_spec("  ")
    ),
    "list.yml": "apiVersion: v1\nkind: List\nitems:\n"
    + "".join(
        "  - "
        + controller("Deployment", f"in-list-{index}").replace("\n", "\n    ").rstrip()
        + "\n"
        for index in range(2)
    ),
    "multi.yaml": "# leading comment\n---\n"
    + controller("Deployment", "first")
    + "---\n# a comment between\n"
    + controller("StatefulSet", "second")
    + "...\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: svc  # trailing\n",
    "anchors.yml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: anchored\n"
        "  labels: &labels {app: anchored}\nspec:\n  selector:\n    matchLabels: *labels\n"
        + template("anchored", "  ")
        + "---\n"
        + "apiVersion: v1\nkind: List\nitems:\n  - kind: Pod\n    metadata:\n"
        + "      name: shared\n      annotations: &shared\n"
        + f"        {ANNOTATION}: {annotation('shared')}\n"
        + "  - kind: Pod\n    metadata:\n      name: again\n      annotations: *shared\n"
    ),
    # Values YAML 1.1 and 1.2 read differently, a tag, a merge key: yamlfast declines, ruamel
    # reads (its reading is the one that counts).
    "declined.yml": controller("Deployment", "declined").replace(
        "spec:\n",
        "spec:\n  paused: yes\n  revisionHistoryLimit: 010\n  minReadySeconds: !!int 3\n",
        1,
    ),
    "merge.yml": (
        "base: &base\n  metadata:\n    annotations:\n"
        f"      {ANNOTATION}: {annotation('merged')}\n"
        "derived:\n  <<: *base\n  kind: Pod\n"
    ),
    "empty.yml": "",
    "comments-only.yml": "# nothing here\n",
    "not-a-pod.yml": f"kind: ConfigMap\ndata:\n  {ANNOTATION}: {annotation('data')}\n",
}


def write(directory: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return directory


def test_same_policies_as_ruamel_on_every_kind(tmp_path: Path) -> None:
    directory = write(tmp_path, CASES)
    expected = reference(directory)
    assert len(expected) == 14  # every case above that carries a policy was found
    assert collect_policies(directory) == expected
    # Each file alone too: no file's policies hide behind another's.
    for name, text in CASES.items():
        alone = write(tmp_path / "alone" / name.replace(".", "-"), {name: text})
        assert collect_policies(alone) == reference(alone), name


def test_same_policies_on_the_seeds_examples(tmp_path: Path) -> None:
    """The examples as given and with a policy put on each pod template, the way generate puts
    it (in ruamel's round trip, written back by yamlio)."""
    assert collect_policies(EXAMPLES) == reference(EXAMPLES) == {}
    annotated = 0
    for path in resources.yaml_files(EXAMPLES):
        loaded = yamlio.load(path)
        for workload in loaded.workloads():
            workload.pod_annotations[ANNOTATION] = annotation(f"{path.name}-{workload.name}")
            annotated += 1
        target = tmp_path / path.relative_to(EXAMPLES)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(loaded.dump())
    assert annotated >= 4
    found = collect_policies(tmp_path)
    assert found == reference(tmp_path)
    assert len(found) == annotated


def refusal(call: Any) -> str:
    with pytest.raises(ContrastError) as caught:
        call()
    return str(caught.value)


BAD = {
    "syntax": "apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n",
    "tab": "a:\n\tb: 1\n",
    "duplicate": "metadata:\n  name: a\n  name: b\n",
    "bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + level)}: &{chr(98 + level)} [{', '.join(['*' + chr(97 + level)] * 10)}]\n"
        for level in range(6)
    ),
    "self": "a: &a [1, *a]\n",
    "deep": "[" * 50_000 + "]" * 50_000 + "\n",
    "not-utf8": "",
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_same_refusals(tmp_path: Path, case: str) -> None:
    path = tmp_path / "bad.yml"
    if case == "not-utf8":
        path.write_bytes(b"a: \xff\n")
    else:
        path.write_text(BAD[case])
    assert refusal(lambda: collect_policies(tmp_path)) == refusal(lambda: reference(tmp_path))


def test_memo_taken_for_exactly_its_bytes(tmp_path: Path) -> None:
    """A memo entry stands for the text it was made from, and for nothing else."""
    directory = write(tmp_path / "resources", {"app.yml": CASES["deployment.yml"]})
    memo = YamlMemo(tmp_path / "yaml-cache.txt")
    text = (directory / "app.yml").read_text()
    # A memo that says this text holds another policy (what a stale or forged entry would say).
    other = {"kind": "Pod", "metadata": {"annotations": {ANNOTATION: annotation("memo")}}}
    memo.remember(text, [yamlio.fingerprint(other)])
    memo.save()
    memo = YamlMemo(tmp_path / "yaml-cache.txt")
    from_memo = collect_policies(directory, memo)
    assert from_memo != reference(directory)  # the memo was read, not the text
    assert list(from_memo.values()) == [decode_annotation(annotation("memo"))]
    # One byte more and the entry no longer applies: the file is parsed.
    (directory / "app.yml").write_text(text + "\n")
    assert collect_policies(directory, memo) == reference(directory)


def test_memo_of_generate_agrees(tmp_path: Path) -> None:
    """What generate's reading remembers gives the same policies as parsing."""
    directory = write(tmp_path / "resources", CASES)
    memo = YamlMemo(tmp_path / "yaml-cache.txt")
    for path in resources.yaml_files(directory):
        yamlio.load(path, plain=True, memo=memo)
    memo.save()
    memo = YamlMemo(tmp_path / "yaml-cache.txt")
    remembered = sum(
        memo.lookup(path.read_text()) is not None for path in resources.yaml_files(directory)
    )
    assert remembered >= 8
    assert collect_policies(directory, memo) == reference(directory)


# generate's policy cache: the policy hash of each annotation it wrote, by the annotation's sha256.


def annotations_in(directory: Path) -> list[str]:
    return [
        value
        for path in resources.yaml_files(directory)
        for document in yamlbounds.load_all_safe(path.read_text(), str(path))
        for value in resources._annotation_values(document)
    ]


def pod(name: str, value: str) -> str:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations:\n"
        f"    {ANNOTATION}: {value}\nspec:\n" + pod_spec("  ")
    )


def written_cache(path: Path, annotations: dict[str, str]) -> dict[str, str]:
    """A policy cache at `path` as generate saves it, for `annotations` (annotation → hash)."""
    cache = PolicyCache(path, "", default_settings(), [])
    for index, (value, hashed) in enumerate(annotations.items()):
        cache.store(hashlib.sha256(str(index).encode()).hexdigest(), value, hashed)
    cache.save()
    return written_annotations(path)


def test_a_cached_annotation_takes_its_hash_from_the_cache(tmp_path: Path) -> None:
    directory = write(tmp_path / "resources", CASES)
    expected = reference(directory)
    found = annotations_in(directory)
    values = {value: policy_hash(decode_annotation(value)).hex() for value in found}
    written = written_cache(tmp_path / "policy-cache.json", values)
    assert len(written) == len(set(found)) >= 10
    assert collect_policies(directory, written=written) == expected
    # The entry is what decides (trusted as the manifest and the memo are): one that says
    # another hash is taken, so the shortcut above was the one used.
    forged = dict.fromkeys(written, "ab" * 32)
    assert set(collect_policies(directory, written=forged)) == {"ab" * 32}


def test_an_annotation_edited_after_generate_is_hashed_anew(tmp_path: Path) -> None:
    """The cache knows the annotation generate wrote; one pasted in by hand is read in full."""
    old, new = annotation("generated"), annotation("pasted by hand")
    written = written_cache(tmp_path / "policy-cache.json", {old: "cd" * 32})
    directory = write(tmp_path / "resources", {"pod.yml": pod("app", new)})
    assert collect_policies(directory, written=written) == reference(directory)
    assert set(reference(directory)) == {policy_hash(decode_annotation(new)).hex()}
    # And a document that is not valid initdata is still refused when the cache lacks it.
    broken = base64.b64encode(gzip.compress(b"= not toml", mtime=0)).decode()
    (directory / "pod.yml").write_text(pod("app", broken))
    with pytest.raises(InitdataError, match="not TOML"):
        collect_policies(directory, written=written)


def test_generates_cache_gives_the_hashes_of_the_annotations_it_wrote(tmp_path: Path) -> None:
    """A real `generate` run: every annotation it wrote is in its cache, with its hash."""
    workspace = GenerateWorkspace(
        root=tmp_path / "workspace",
        layout=write_layout(tmp_path / "layout"),
        reference_values=reference_values_file(tmp_path / "reference-values.json"),
    )
    workspace.add_example("multi-runtime")
    workspace.add_coordinator("metal-qemu-snp")
    assert workspace.generate("--reference-values", "metal-qemu-snp", str(workspace.resources)) == 0
    written = written_annotations(workspace.root / "policy-cache.json")
    expected = reference(workspace.resources)
    found = annotations_in(workspace.resources)
    cached = [resources._written_hash(value, written) for value in found]
    assert len(found) >= 3
    assert None not in cached  # the Coordinator's too
    assert set(cached) == set(expected)
    assert collect_policies(workspace.resources, written=written) == expected
