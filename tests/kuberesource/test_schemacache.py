"""The schema cache: a changed byte of the input or of the check misses it, failures never hit.

The cache (contrast.kuberesource.schemacache) lets an unchanged `generate` re-run skip the
jsonschema check of resources that passed last time. Each byte of a resource's plain JSON is
changed here and the key must change with it; so must a change of a library version or of the
check's code; a resource the check refuses is never recorded.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

import contrast
from contrast import distributions
from contrast.kuberesource import schema, schemacache
from contrast.kuberesource.schemacache import FILE, SchemaCache

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "labels": {"app": "web"}},
    "spec": {
        "containers": [{"name": "web", "image": "nginx:1", "args": ["-p", "80"], "tty": True}]
    },
}


def _cache(tmp_path: Path, digest: str = "a" * 64) -> SchemaCache:
    return SchemaCache(tmp_path / FILE, digest)


def _upgrade(monkeypatch: pytest.MonkeyPatch, library: str) -> None:
    """`library` is found at another version, as after an upgrade."""
    real = distributions.versions

    def versions(names: Sequence[str]) -> list[str | None]:
        found = zip(names, real(names), strict=True)
        return ["0.0.0" if name == library else version for name, version in found]

    monkeypatch.setattr(distributions, "versions", versions)


def _checked(cache: SchemaCache, resource: dict[str, Any]) -> str | None:
    """What generate does with one resource: check it unless it passed, then record it."""
    key = cache.key(resource)
    if not cache.passed(key):
        schema.check(resource, "test")
    cache.record(key)
    return key


def test_a_recorded_pass_is_found_by_the_next_run(tmp_path: Path) -> None:
    first = _cache(tmp_path)
    key = _checked(first, POD)
    assert key is not None
    assert not first.passed(first.key({**POD, "kind": "Service"}))
    first.save()
    second = _cache(tmp_path)
    assert second.passed(second.key(copy.deepcopy(POD)))
    assert second.passed(key)


def test_the_same_content_read_by_ruamel_has_the_same_key(tmp_path: Path) -> None:
    """A round-trip node (ScalarString, CommentedMap) is keyed by the plain value it holds."""
    cache = _cache(tmp_path)
    text = json.dumps(POD)
    read = YAML(typ="rt").load(text)
    assert cache.key(read) == cache.key(POD)


def test_a_resource_as_read_is_keyed_by_its_fingerprint_then(tmp_path: Path) -> None:
    """generate passes the fingerprint made when a file was read: the same key as made now."""
    from contrast.kuberesource.yamlio import fingerprint, load_text

    cache = _cache(tmp_path)
    for plain in (True, False):
        file = load_text(json.dumps(POD) + "\n", plain=plain)
        (resource,) = file.documents
        as_read = file.fingerprints_as_read()
        assert as_read == {id(resource): fingerprint(resource)}
        assert cache.key(resource, as_read[id(resource)]) == cache.key(resource)
    assert cache.key(POD, "{}") != cache.key(POD)  # the content given is the content keyed


@given(data=st.data())
def test_one_changed_byte_anywhere_in_the_resource_misses(data: st.DataObject) -> None:
    cache = SchemaCache(Path("/nonexistent") / FILE, "a" * 64)
    text = json.dumps(POD)
    position = data.draw(st.integers(0, len(text) - 1))
    replacement = data.draw(st.characters(codec="utf-8").filter(lambda c: c != text[position]))
    changed_text = text[:position] + replacement + text[position + 1 :]
    try:
        changed = json.loads(changed_text)
    except ValueError:
        return  # not JSON any more: no resource to compare
    if not isinstance(changed, dict):
        return
    keys = (cache.key(POD), cache.key(changed))
    same_reading = json.dumps(changed) == text
    assert (keys[0] == keys[1]) == same_reading


def test_key_order_and_types_are_part_of_the_key(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    reordered = {key: POD[key] for key in reversed(list(POD))}
    assert cache.key(reordered) != cache.key(POD)
    as_number = copy.deepcopy(POD)
    as_number["spec"]["containers"][0]["tty"] = 1  # True and 1 are equal in Python
    assert as_number == POD
    assert cache.key(as_number) != cache.key(POD)


def test_other_schemas_or_code_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = schemacache.schema_digest()
    assert _cache(tmp_path, before).key(POD) != _cache(tmp_path, "b" * 64).key(POD)
    _upgrade(monkeypatch, "kubernetes-validate")
    assert schemacache.schema_digest() != before
    monkeypatch.undo()
    code = tmp_path / "schema.py"
    code.write_bytes(Path(schema.__file__).read_bytes() + b"\n")
    monkeypatch.setattr(schemacache.schema_module, "__file__", str(code))
    assert schemacache.schema_digest() != before


def test_a_refused_resource_is_never_recorded(tmp_path: Path) -> None:
    wrong = copy.deepcopy(POD)
    wrong["spec"]["containers"][0]["tty"] = "no"
    for _ in range(2):  # refused again on the next run: nothing was written to skip it
        cache = _cache(tmp_path)
        with pytest.raises(schema.SchemaError, match="tty"):
            _checked(cache, wrong)
        cache.save()
        assert not (tmp_path / FILE).exists()


def test_a_resource_without_string_kind_has_no_key(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert cache.key({**POD, "kind": ["Pod"]}) is None
    assert cache.key({"kind": "Pod"}) is None
    assert not cache.passed(None)


def test_a_run_that_adds_a_resource_keeps_only_its_own(tmp_path: Path) -> None:
    other = {**POD, "metadata": {"name": "other"}}
    first = _cache(tmp_path)
    _checked(first, POD)
    _checked(first, other)
    first.save()
    written = (tmp_path / FILE).read_bytes()
    unchanged = _cache(tmp_path)
    _checked(unchanged, POD)
    unchanged.save()
    assert (tmp_path / FILE).read_bytes() == written  # nothing new: not written
    third = _cache(tmp_path)
    new = {**POD, "metadata": {"name": "new"}}
    _checked(third, POD)
    _checked(third, new)
    third.save()
    document = json.loads((tmp_path / FILE).read_text())
    assert document["passed"] == sorted([third.key(POD), third.key(new)])


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"format": 2, "passed": []}',
        '{"format": 1, "passed": {}}',
        '{"format": 1, "passed": [[["deep"]]]}',
        '{"format": 1, "passed": ["not a hash", 1, null]}',
    ],
)
def test_a_damaged_file_is_ignored(tmp_path: Path, text: str) -> None:
    (tmp_path / FILE).write_text(text)
    cache = _cache(tmp_path)
    assert not cache.passed(cache.key(POD))
    _checked(cache, POD)
    cache.save()
    assert _cache(tmp_path).passed(cache.key(POD))


MANIFEST = b'{\n  "ReferenceValues": {"snp": [{"Platform": "Milan"}]}\n}\n'


def test_a_changed_byte_of_the_manifest_misses(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    key = cache.input_key("manifest", MANIFEST)
    cache.record(key)
    cache.save()
    again = _cache(tmp_path)
    assert again.passed(again.input_key("manifest", MANIFEST))
    for position in range(len(MANIFEST)):
        changed = bytearray(MANIFEST)
        changed[position] ^= 0x01
        assert not again.passed(again.input_key("manifest", bytes(changed)))
    assert not again.passed(again.input_key("manifest", MANIFEST + b" "))


def test_a_manifest_key_is_never_a_resource_key(tmp_path: Path) -> None:
    """The tag keeps the two checks apart: a manifest's pass does not pass a resource, or back."""
    cache = _cache(tmp_path, "a" * 64)
    resource_text = json.dumps(["v1", "Pod", POD], separators=(",", ":")).encode()
    assert cache.input_key("manifest", resource_text) != cache.key(POD)
    assert _cache(tmp_path, "b" * 64).input_key("manifest", MANIFEST) == cache.input_key(
        "manifest", MANIFEST
    )


def test_other_manifest_code_or_libraries_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = schemacache.input_digest("manifest")
    known = SchemaCache(tmp_path / FILE, "a" * 64, {"manifest": before})
    other = SchemaCache(tmp_path / FILE, "a" * 64, {"manifest": "c" * 64})
    assert known.input_key("manifest", MANIFEST) != other.input_key("manifest", MANIFEST)
    for library in schemacache.MANIFEST_LIBRARIES:
        _upgrade(monkeypatch, library)
        assert schemacache.input_digest("manifest") != before, library
        monkeypatch.undo()
    monkeypatch.undo()
    package = tmp_path / "package"
    for name in schemacache.MANIFEST_CODE:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_bytes((Path(contrast.__file__).parent / name).read_bytes())
    monkeypatch.setattr(contrast, "__file__", str(package / "__init__.py"))
    assert schemacache.input_digest("manifest") == before  # the same bytes elsewhere: the same key
    for name in schemacache.MANIFEST_CODE:
        original = (package / name).read_bytes()
        (package / name).write_bytes(original + b"\n")
        assert schemacache.input_digest("manifest") != before, name
        (package / name).write_bytes(original)


def _rules_key(cache: SchemaCache, text: str) -> str:
    return cache.input_key("rules", text.encode())


RULES = "package agent_policy\n\ndefault CreateContainerRequest := false\n"


def test_a_changed_byte_of_the_rules_or_another_parser_misses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cache(tmp_path)
    cache.record(_rules_key(cache, RULES))
    cache.save()
    again = _cache(tmp_path)
    assert again.passed(_rules_key(again, RULES))
    assert not again.passed(_rules_key(again, RULES.replace("false", "true")))
    assert not again.passed(_rules_key(again, RULES + "\n"))
    assert _rules_key(again, RULES) != again.input_key("manifest", RULES.encode())
    _upgrade(monkeypatch, "gordon-to-regorus")
    assert not _cache(tmp_path).passed(_rules_key(_cache(tmp_path), RULES))
