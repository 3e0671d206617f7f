"""libyaml's fast reading agrees with ruamel's, or steps aside: ruamel's reading always wins."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml.error import YAMLError

from contrast.kuberesource import yamlfast, yamlio
from contrast.kuberesource.yamlio import load_text, to_plain


def ruamel(text: str) -> list[Any]:
    return [to_plain(document) for document in yamlio._yaml().load_all(text)]


def _json(documents: Any) -> str:
    return json.dumps(documents, sort_keys=False)


# YAML 1.1 (PyYAML's default) and 1.2 (ruamel's) read these plain scalars differently.
# Where the fast reader reads one itself, its value is ruamel's; otherwise it steps aside.
DISAGREEMENTS = {
    "yes": "yes",  # 1.1: true
    "No": "No",  # 1.1: false
    "on": "on",  # 1.1: true
    "OFF": "OFF",  # 1.1: false
    "y": "y",  # 1.1: true
    "0777": None,  # 1.1: 511; ruamel 1.2: octal too, but by its own rules
    "0o17": None,  # 1.2: 15; 1.1: a string
    "1_000": None,  # 1.1: 1000
    "12:30": "12:30",  # 1.1: 750 (base 60)
    "0x1F": None,  # both hexadecimal: ruamel keeps its style, the value is read by ruamel
    "1e3": None,  # 1.2: 1000.0; 1.1: a string
    ".inf": None,
    "2024-01-01": None,  # a timestamp
    "=": None,  # 1.1's value key
}


@pytest.mark.parametrize(("scalar", "fast"), DISAGREEMENTS.items(), ids=DISAGREEMENTS.keys())
def test_yaml_1_1_and_1_2_disagreements_read_as_ruamel_reads_them(
    scalar: str, fast: str | None
) -> None:
    text = f"key: {scalar}\n"
    documents = yamlfast.load_all(text)
    if fast is None:
        assert documents is None
    else:
        assert documents == ({"key": fast},)
        assert _json(list(documents)) == _json(ruamel(text))
    # And what generate sees is ruamel's reading, whichever reader read it.
    loaded = load_text(text, "x.yml", plain=True)
    assert _json([to_plain(d) for d in loaded.documents]) == _json(ruamel(text))


DECLINED = {
    "explicit tag": "a: !!str 5\n",
    "local tag": "a: !secret x\n",
    "directive": "%YAML 1.1\n---\na: yes\n",
    "merge key": "base: &b {x: 1}\nd:\n  <<: *b\n",
    "duplicate key": "a: 1\na: 2\n",
    "not YAML": "a: [1,\n",
    "unhashable key": "? [1, 2]\n: x\n",
    "a key that is not a string": "1: x\ntrue: y\n",
}


@pytest.mark.parametrize("text", DECLINED.values(), ids=DECLINED.keys())
def test_what_ruamel_must_read_is_declined(text: str) -> None:
    assert yamlfast.load_all(text) is None


def test_what_both_read_alike_is_read_fast() -> None:
    text = (
        "a: 1\nb: -2\nc: 1.5\nd: true\ne: null\nf: ~\ng:\nh: 'x'\ni: \"y\\n\"\n"
        "j: [1, {k: v}]\nl: |\n  one\n  two\nm: >-\n  a\n  b\nn: &x s\no: *x\n---\n- p\n"
    )
    documents = yamlfast.load_all(text)
    assert documents is not None
    assert _json(list(documents)) == _json(ruamel(text))


SCALARS = st.sampled_from(
    ["1", "-0", "+7", "1.0", ".5", "yes", "no", "on", "true", "False", "NULL", "~", "", "0777",
     "0o7", "0x1f", "1_0", "1e5", "12:30", "2001-12-14", "=", "<<", "'q'", '"d\\t"', "a b",
     "é", "-", "x: y", "[1]", "{}", "|\n    lit", ">\n    fold", "&a v", "*a", "!!str 1",
     "#c", "a # c"]
)  # fmt: skip
KEYS = st.sampled_from(["a", "b", "1", "yes", "<<", "'k'", "? x"])


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(
    lines=st.lists(st.tuples(st.sampled_from(["", "  "]), KEYS, SCALARS), min_size=1, max_size=6)
)
def test_any_mapping_reads_as_ruamel_reads_it_or_is_declined(
    lines: list[tuple[str, str, str]],
) -> None:
    text = "".join(f"{indent}{key}: {value}\n" for indent, key, value in lines)
    try:
        expected = ruamel(text)
    except (YAMLError, RecursionError, TypeError):  # TypeError: ruamel on `? x: [1]`
        assert yamlfast.load_all(text) is None
        with pytest.raises(yamlio.YamlError):
            load_text(text, "x.yml", plain=True)
        return
    documents = yamlfast.load_all(text)
    if documents is not None:
        assert _json([to_plain(d) for d in documents]) == _json(expected)


def test_a_plain_document_changed_without_its_round_trip_is_carried_over() -> None:
    text = "# keep me\nkind: Deployment  # and me\nspec:\n  template:\n    metadata: {}\n"
    file = load_text(text, "d.yml", plain=True)
    assert file.plain
    file.documents[0]["spec"]["template"]["spec"] = {}  # a reader that filled in a mapping
    file.documents[0]["kind"] = "Deployment"
    dumped = file.dump()
    assert "# keep me" in dumped
    assert "# and me" in dumped
    assert ruamel(dumped) == [file.documents[0]]


def test_a_plain_document_changed_on_its_round_trip_too_is_written_from_it() -> None:
    text = "a: 1  # one\nb: [x]\n---\nc: 2\n"
    file = load_text(text, "d.yml", plain=True)
    file.documents[0]["b"].append("y")
    file.round_trip(0)["b"].append("y")
    assert file.changed_documents() == [0]
    assert file.dump() == "a: 1  # one\nb: [x, y]\n---\nc: 2\n"
