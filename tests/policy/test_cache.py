"""The policy cache: a changed byte of any input misses it, a hit is the very annotation.

The cache (contrast.policy.cache) lets an unchanged `generate` re-run reuse the annotation each
pod carries instead of deriving its policy again. Every input the derivation reads is changed
here by one byte, and the key must change with it; the initdata annotation is left out of the
key because the derivation does not read it, which is shown on the generator itself.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contrast.images.model import ImageFacts
from contrast.kuberesource.workloads import Workload
from contrast.policy.cache import PolicyCache
from contrast.policy.generate import PolicyGenerator, default_rules
from contrast.policy.initdata import ANNOTATION
from contrast.policy.settings import Settings, default_settings
from tests.policy.test_generate import APP, container, images, pod

CONFIG = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}


@dataclasses.dataclass
class Inputs:
    """Everything a policy is derived from, to be changed one byte at a time."""

    rules: str
    settings: dict[str, Any]
    config: list[dict[str, Any]]
    workload: Workload
    images: dict[str, ImageFacts]

    def key(self, path: Path) -> str:
        cache = PolicyCache(path, self.rules, Settings(self.settings), self.config)
        generator = PolicyGenerator(self.rules, Settings(self.settings))
        return cache.key(self.workload, self.images, generator.required_images(self.workload))


def inputs() -> Inputs:
    workload = pod(container("app", env=[{"name": "A", "value": "1"}]))
    workload.pod_template["metadata"]["annotations"] = {"team": "blue"}
    return Inputs(
        default_rules(),
        copy.deepcopy(dict(default_settings().document)),
        [copy.deepcopy(CONFIG)],
        workload,
        images(APP),
    )


def _facts(change: Callable[[ImageFacts], ImageFacts]) -> Callable[[Inputs], None]:
    def apply(given: Inputs) -> None:
        given.images[APP] = change(given.images[APP])

    return apply


CHANGES: dict[str, Callable[[Inputs], None]] = {
    "rules": lambda given: setattr(given, "rules", given.rules.replace("false", "fal se", 1)),
    "settings": lambda given: given.settings["common"].update(dns_label="x"),
    "a ConfigMap": lambda given: given.config[0]["data"].update(k="w"),
    "the workload": lambda given: given.workload.pod_spec["containers"][0].update(name="apq"),
    "another annotation": lambda given: given.workload.pod_annotations.update(team="bluf"),
    "an image digest": _facts(
        lambda facts: dataclasses.replace(facts, digest=facts.digest[:-1] + "1")
    ),
    "an image's passwd": _facts(
        lambda facts: dataclasses.replace(facts, etc_passwd=facts.etc_passwd + "\n")
    ),
    "an image's config": _facts(
        lambda facts: dataclasses.replace(
            facts, config=dataclasses.replace(facts.config, working_dir="/srw")
        )
    ),
    "an image's size": _facts(lambda facts: dataclasses.replace(facts, compressed_size=1)),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_a_changed_byte_misses_the_cache(tmp_path: Path, change: Callable[[Inputs], None]) -> None:
    given = inputs()
    before = given.key(tmp_path / "cache.json")
    assert given.key(tmp_path / "cache.json") == before  # the same inputs: the same key
    change(given)
    assert given.key(tmp_path / "cache.json") != before


FACT_CHANGES = [name for name in CHANGES if name.startswith("an image")]


@pytest.mark.parametrize("name", FACT_CHANGES)
def test_one_cache_keys_changed_facts_anew(tmp_path: Path, name: str) -> None:
    """The image parts of the keys are made once per image: other facts make them again."""
    given = inputs()
    cache = PolicyCache(tmp_path / "cache.json", given.rules, Settings(given.settings), [])
    generator = PolicyGenerator(given.rules, Settings(given.settings))
    used = generator.required_images(given.workload)
    before = cache.key(given.workload, given.images, used)
    assert cache.key(given.workload, given.images, used) == before
    CHANGES[name](given)
    assert cache.key(given.workload, given.images, used) != before
    fresh = PolicyCache(tmp_path / "cache.json", given.rules, Settings(given.settings), [])
    assert cache.key(given.workload, given.images, used) == fresh.key(
        given.workload, given.images, used
    )


@pytest.mark.parametrize("others", [None, {}, {"team": "blue"}], ids=["none", "empty", "another"])
def test_the_initdata_annotation_is_not_read(others: dict[str, str] | None) -> None:
    """What leaving it out of the key relies on: the policy does not depend on it."""
    generator = PolicyGenerator(default_rules(), default_settings())
    policies = set()
    for initdata in (None, "QQ==", "Qg=="):
        workload = pod(container("app"), kind="Deployment")
        metadata = workload.pod_template["metadata"]
        if others is not None:
            metadata["annotations"] = dict(others)
        if initdata is not None:
            metadata.setdefault("annotations", {})[ANNOTATION] = initdata
        policies.add(generator.generate(workload, images(APP)).annotation)
    if not others:  # an absent, null or empty annotations mapping: the same pod
        workload = pod(container("app"), kind="Deployment")
        workload.pod_template["metadata"]["annotations"] = None
        policies.add(generator.generate(workload, images(APP)).annotation)
    assert len(policies) == 1


def test_the_initdata_annotation_is_keyed_where_the_resource_names_it(tmp_path: Path) -> None:
    given = inputs()
    path = tmp_path / "cache.json"
    plain = given.key(path)
    given.workload.pod_annotations[ANNOTATION] = "QQ=="
    assert given.key(path) == plain  # not read: the first run's key
    env = {
        "name": "I",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION}']"}},
    }
    given.workload.pod_spec["containers"][0]["env"].append(env)
    named = given.key(path)
    given.workload.pod_annotations[ANNOTATION] = "Qg=="
    assert given.key(path) != named


def test_a_hit_is_only_the_very_annotation_and_the_file_keeps_the_last_run(
    tmp_path: Path,
) -> None:
    given = inputs()
    path = tmp_path / "cache.json"
    cache = PolicyCache(path, given.rules, Settings(given.settings), given.config)
    cache.store("a" * 64, "QQ==", "1" * 64)
    cache.store("b" * 64, "Qg==", "2" * 64)
    cache.save()
    again = PolicyCache(path, given.rules, Settings(given.settings), given.config)
    assert again.lookup("a" * 64, "QQ==") == "1" * 64
    assert again.lookup("a" * 64, "QQ= =") is None  # another annotation: derive
    assert again.lookup("a" * 64, None) is None  # none yet: derive
    assert again.lookup("c" * 64, "QQ==") is None
    again.save()  # only what this run used
    assert list(json.loads(path.read_text())["entries"]) == ["a" * 64]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"format": 2, "entries": {}}',
        '{"format": 1, "entries": {"' + "a" * 64 + '": ["QQ==", "x"]}}',
        '{"format": 1, "entries": {"' + "a" * 64 + '": "' + "b" * 64 + '"}}',
        '{"format": 1, "entries": ' + "[" * 100 + "]" * 100 + "}",
    ],
)
def test_a_cache_that_cannot_be_used_is_empty(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cache.json"
    path.write_text(text)
    given = inputs()
    cache = PolicyCache(path, given.rules, Settings(given.settings), given.config)
    assert cache.lookup("a" * 64, "QQ==") is None


def _ruamel_form(value: Any) -> Any:
    """`value` as ruamel's round-trip nodes: the key copies such a resource whole."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(value, dict):
        return CommentedMap((key, _ruamel_form(item)) for key, item in value.items())
    if isinstance(value, list):
        return CommentedSeq(_ruamel_form(item) for item in value)
    return value


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "CronJob"])
@pytest.mark.parametrize(
    "annotations",
    [None, {}, {ANNOTATION: "QQ=="}, {ANNOTATION: "QQ==", "team": "blue"}],
    ids=["none", "empty", "only-initdata", "initdata-and-another"],
)
def test_a_plain_resource_is_keyed_as_a_whole_copy_and_left_as_it_was(
    tmp_path: Path, kind: str, annotations: dict[str, str] | None
) -> None:
    """A plain resource's key copies only the mappings it edits: the same key as a resource of
    ruamel's nodes (copied whole), and nothing in the resource changes."""
    given = inputs()
    given.workload = pod(container("app"), kind=kind)
    metadata = given.workload.pod_template["metadata"]
    if annotations is None:
        metadata.pop("annotations", None)
    else:
        metadata["annotations"] = dict(annotations)
    before = copy.deepcopy(given.workload.resource)
    plain = given.key(tmp_path / "cache.json")
    assert given.workload.resource == before
    assert json.dumps(given.workload.resource) == json.dumps(before)  # the key order too
    given.workload = Workload(_ruamel_form(given.workload.resource))
    assert given.key(tmp_path / "cache.json") == plain
