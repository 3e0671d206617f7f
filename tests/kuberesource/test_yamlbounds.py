"""YAML from outside is bounded: alias bombs, self-references and deep nesting are refused."""

from __future__ import annotations

import itertools

import pytest
from ruamel.yaml import YAML

from contrast.kuberesource import yamlbounds, yamlio
from contrast.kuberesource.workloads import ResourceError

LEVELS = "abcdefghi"


def alias_bomb(levels: int) -> str:
    """The billion laughs: each level lists the previous one nine times (342 bytes for 9)."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in itertools.pairwise(LEVELS[:levels]):
        lines.append(f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]")
    return "\n".join(lines) + "\n"


SELF_REFERENCE = "&a {kind: List, items: [*a]}\n"
DEEP = "[" * 5000 + "]" * 5000 + "\n"
ANCHORED = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
    - name: a
      image: ghcr.io/example/a:1
      env: &env
        - {name: MODE, value: production}
        - {name: REGION, value: eu}
      resources: &resources
        limits: {memory: 128Mi}
        requests: {memory: 128Mi}
    - name: b
      image: ghcr.io/example/b:1
      env: *env
      resources:
        <<: *resources
"""


def test_the_full_alias_bomb_is_small_text() -> None:
    assert len(alias_bomb(9)) < 400


@pytest.mark.parametrize("levels", [6, 9])
def test_an_alias_bomb_is_refused_in_one_line(levels: int) -> None:
    with pytest.raises(ResourceError) as raised:
        yamlio.load_text(alias_bomb(levels), "bomb.yml")
    message = raised.value.explain()
    assert "\n" not in message
    assert message.startswith("bomb.yml: document 1: ")
    assert f"{yamlbounds.ALIAS_EXPANSION_BUDGET}" in message


@pytest.mark.parametrize(
    ("text", "message"),
    [(SELF_REFERENCE, "refers to itself"), (DEEP, "nested more deeply")],
    ids=["self-reference", "deep nesting"],
)
def test_self_reference_and_deep_nesting_are_refused(text: str, message: str) -> None:
    with pytest.raises(ResourceError, match=message):
        yamlio.load_text(text, "odd.yml")
    with pytest.raises(ResourceError, match=message):
        yamlbounds.load_all_safe(text, "odd.yml")


def test_a_few_anchors_are_fine() -> None:
    (pod,) = yamlio.load_text(ANCHORED, "pod.yml").documents
    first, second = pod["spec"]["containers"]
    assert second["env"] == first["env"]
    assert second["resources"]["limits"]["memory"] == "128Mi"
    (plain,) = yamlbounds.load_all_safe(ANCHORED, "pod.yml")
    assert plain["spec"]["containers"][1]["env"][0]["value"] == "production"


def test_the_budget_is_per_stream() -> None:
    # Each document stays below the budget, together they exceed it.
    one = alias_bomb(5)  # about 66 000 nodes through aliases
    with pytest.raises(ResourceError, match="document 2"):
        yamlio.load_text(f"{one}---\n{one}", "two.yml")


def test_expansion_is_measured_without_expanding() -> None:
    document = YAML(typ="safe").load(alias_bomb(9))
    expanded, literal = yamlbounds.expansion(document)
    assert literal < 200
    assert expanded > 9**9
