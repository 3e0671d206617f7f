"""The YAML memo: a remembered text reads as it was read or written, a changed byte misses.

What `yaml-cache.txt` may say about a text is what generate's readers make of it (yamlfast, or
ruamel where yamlfast declines). For a file generate wrote, that rests on the writers writing
text that reads back as the content it was written for; the random documents below check it
through the same path generate takes (a plain file changed, written, remembered).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

import contrast
from contrast.kuberesource import yamlfast, yamlio, yamlmemo
from contrast.kuberesource.yamlmemo import FILE, YamlMemo
from tests.kuberesource.test_yamlrt import (
    DEPLOYMENT,
    INDENTATIONS,
    _documents,
    _ruamel_dump,
    _ruamel_load,
)

TWO = "a: 1\nb: [x, 'yes', '0777', 2.5]\n---\nkind: Pod\nmetadata: {name: web}\n"


def _memo(tmp_path: Path, digest: str = "a" * 64) -> YamlMemo:
    return YamlMemo(tmp_path / FILE, digest)


def _reading(text: str) -> list[str]:
    """The fingerprints of `text` as generate reads it without the memo."""
    read = yamlio.load_text(text, "x.yml", plain=True)
    return [yamlio.fingerprint(document) for document in read.documents]


def test_a_file_read_is_found_by_the_next_run_with_the_same_documents(tmp_path: Path) -> None:
    first = _memo(tmp_path)
    read = yamlio.load_text(TWO, "x.yml", plain=True, memo=first)
    first.save()
    second = _memo(tmp_path)
    found = second.lookup(TWO)
    assert found is not None
    fingerprints, documents = found
    assert fingerprints == _reading(TWO)
    assert list(documents) == list(read.documents)
    again = yamlio.load_text(TWO, "x.yml", plain=True, memo=second)
    assert again.documents == read.documents
    assert again.plain
    assert not again.changed
    assert again.dump() == TWO


def test_a_changed_byte_misses(tmp_path: Path) -> None:
    memo = _memo(tmp_path)
    memo.remember(TWO, _reading(TWO))
    for position in range(len(TWO)):
        for replacement in ("z", " ", "\n"):
            changed = TWO[:position] + replacement + TWO[position + 1 :]
            if changed != TWO:
                assert memo.lookup(changed) is None, repr(changed)


def test_a_text_with_an_anchor_is_never_remembered(tmp_path: Path) -> None:
    text = "a: &x {b: 1}\nc: *x\n"
    memo = _memo(tmp_path)
    yamlio.load_text(text, "x.yml", plain=True, memo=memo)
    memo.remember(text, _reading(text))
    assert memo.lookup(text) is None
    memo.save()
    assert not (tmp_path / FILE).exists()


def test_other_code_or_versions_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = yamlmemo.code_digest()
    first = _memo(tmp_path, before)
    first.remember(TWO, _reading(TWO))
    first.save()
    assert _memo(tmp_path, before).lookup(TWO) is not None
    assert _memo(tmp_path, "b" * 64).lookup(TWO) is None
    monkeypatch.setattr(yamlmemo.ruamel.yaml, "__version__", "0.0.0")
    assert yamlmemo.code_digest() != before
    monkeypatch.undo()
    monkeypatch.setattr(contrast, "__version__", "0.0.0")
    assert yamlmemo.code_digest() != before
    monkeypatch.undo()
    package = tmp_path / "kuberesource"
    package.mkdir()
    here = Path(yamlmemo.__file__).parent
    for path in here.glob("yaml*.py"):
        (package / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(yamlmemo, "__file__", str(package / "yamlmemo.py"))
    assert yamlmemo.code_digest() == before
    (package / "yamlfast.py").write_bytes((here / "yamlfast.py").read_bytes() + b"\n")
    assert yamlmemo.code_digest() != before


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"format": 2, "files": {}}',
        '{"format": 1, "files": []}',
        '{"format": 1, "files": {"not a hash": ["{}"]}}',
        '{"format": 1, "files": {"' + "0" * 64 + '": "{}"}}',
        # The lines this module writes, damaged:
        "contrast-yaml-cache 2\n",  # no `end`: cut short
        "contrast-yaml-cache 2\nend",  # no last newline
        "contrast-yaml-cache 1\nend\n",  # another format
        "contrast-yaml-cache 2\nnot-a-hash 1\n{}\nend\n",
        "contrast-yaml-cache 2\n" + "0" * 64 + " 2\n{}\nend\n",  # one document of two
        "contrast-yaml-cache 2\n" + "0" * 64 + " x\n{}\nend\n",
        "contrast-yaml-cache 2\n\xff\nend\n",
    ],
)
def test_a_damaged_file_is_ignored(tmp_path: Path, text: str) -> None:
    (tmp_path / FILE).write_text(text)
    memo = _memo(tmp_path)
    assert memo.lookup(TWO) is None
    yamlio.load_text(TWO, "x.yml", plain=True, memo=memo)
    memo.save()
    assert _memo(tmp_path).lookup(TWO) is not None


def test_an_entry_that_is_not_json_is_parsed_instead(tmp_path: Path) -> None:
    memo = _memo(tmp_path)
    memo.remember(TWO, ["{not json", "{}"])
    assert memo.lookup(TWO) is None
    read = yamlio.load_text(TWO, "x.yml", plain=True, memo=memo)
    assert [yamlio.fingerprint(document) for document in read.documents] == _reading(TWO)


def test_a_run_that_adds_nothing_does_not_write(tmp_path: Path) -> None:
    first = _memo(tmp_path)
    yamlio.load_text(TWO, "x.yml", plain=True, memo=first)
    first.save()
    written = (tmp_path / FILE).read_bytes()
    (tmp_path / FILE).chmod(0o400)  # a write would fail... or replace the file: compare below
    unchanged = _memo(tmp_path)
    yamlio.load_text(TWO, "x.yml", plain=True, memo=unchanged)
    unchanged.save()
    assert (tmp_path / FILE).read_bytes() == written
    assert (tmp_path / FILE).stat().st_mode & 0o777 == 0o400


def _written_and_remembered(base: str, content: Any) -> tuple[str, list[str] | None]:
    """A plain file of `base` whose document generate changed to `content`, written."""
    memo = YamlMemo(Path("/nonexistent") / FILE, "a" * 64)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "x.yml"
        path.write_text(base)
        file = yamlio.load(path, plain=True)
        document = file.documents[0]
        document.clear()
        document.update(content)
        assert file.write(memo=memo)
        text = path.read_bytes().decode("utf-8")
    found = memo.lookup(text)
    return text, None if found is None else found[0]


def _read_by_generate(text: str) -> list[str]:
    """Fingerprints of `text` as generate reads it: yamlfast, or ruamel where it declines."""
    documents = yamlfast.load_all(text)
    if documents is None:
        documents = tuple(YAML(typ="rt").load_all(text))
    return [yamlio.fingerprint(document) for document in documents]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=_documents(), indentation=st.sampled_from(INDENTATIONS))
def test_what_generate_writes_reads_back_as_remembered(
    document: Any, indentation: yamlio.Indentation
) -> None:
    """Random content (awkward strings, nulls, floats, nesting) in files of each indentation."""
    base = _ruamel_dump(_ruamel_load(DEPLOYMENT), indentation, False)
    text, remembered = _written_and_remembered(base, yamlio.to_plain(document))
    printable = all(" " <= character <= "~" or character == "\n" for character in text)
    assert (remembered is not None) == (printable and "&" not in text)
    if remembered is not None:
        assert _read_by_generate(text) == remembered


def test_a_written_character_that_ruamel_changes_is_not_remembered() -> None:
    """ruamel writes a NEL in a single-quoted string, which reads back as a space."""
    base = _ruamel_dump(_ruamel_load(DEPLOYMENT), INDENTATIONS[0], False)
    text, remembered = _written_and_remembered(base, {"name": "\x85"})
    assert _read_by_generate(text) != [json.dumps({"name": "\x85"}, separators=(",", ":"))]
    assert remembered is None


def test_most_random_writes_are_remembered() -> None:
    """The memo is used: a writer path that remembered nothing would pass the tests above."""
    base = _ruamel_dump(_ruamel_load(DEPLOYMENT), INDENTATIONS[0], False)
    remembered = 0
    for seed in range(100):
        content = {"name": f"web-{seed}", "replicas": seed, "args": ["--port", str(seed)]}
        _, fingerprints = _written_and_remembered(base, content)
        remembered += fingerprints is not None
    assert remembered == 100


def test_generated_examples_read_back_as_remembered(tmp_path: Path) -> None:
    """The examples as generate leaves them: the memo says what parsing says."""
    examples = Path(__file__).parents[1] / "generate" / "examples"
    texts = [path.read_text() for path in sorted(examples.rglob("*.yml"))]
    assert texts
    memo = _memo(tmp_path)
    for text in texts:
        yamlio.load_text(text, "x.yml", plain=True, memo=memo)
        found = memo.lookup(text)
        if "&" in text:
            assert found is None
            continue
        assert found is not None
        assert found[0] == _reading(text) == _read_by_generate(text)
        assert json.loads(json.dumps(list(found[1]))) == list(found[1])


def test_the_file_is_lines_that_read_back_as_written(tmp_path: Path) -> None:
    """Each entry: its key and count, then its fingerprints, one a line (see the docstring)."""
    memo = _memo(tmp_path)
    memo.remember(TWO, ['{"a":"\\n\u2028\x85"}', "{}"])  # an escaped newline; raw U+2028, NEL
    memo.remember("b: 1\n", ["a\nb"])  # a newline cannot be a line: not remembered
    memo.save()
    lines = (tmp_path / FILE).read_text(encoding="utf-8").split("\n")
    assert lines[0] == "contrast-yaml-cache 2"
    assert lines[-2:] == ["end", ""]
    assert lines[1] == f"{memo.key(TWO)} 2"
    assert len(lines) == 6
    again = _memo(tmp_path)
    assert again.lookup(TWO) == (['{"a":"\\n\u2028\x85"}', "{}"], ({"a": "\n\u2028\x85"}, {}))
    assert again.lookup("b: 1\n") is None


def test_an_entry_is_read_out_only_when_used(tmp_path: Path) -> None:
    """A damaged byte in one entry costs only that entry (it is parsed instead); an empty
    file (no documents) is remembered too."""
    memo = _memo(tmp_path)
    memo.remember(TWO, ['{"a":1}', "{}"])
    memo.remember("", [])
    memo.remember("c: 1\n", ['{"c":1}'])
    memo.save()
    data = (tmp_path / FILE).read_bytes()
    (tmp_path / FILE).write_bytes(data.replace(b'{"c":1}', b'{"c":\xff}'))
    again = _memo(tmp_path)
    assert again.lookup(TWO) == (['{"a":1}', "{}"], ({"a": 1}, {}))
    assert again.lookup("") == ([], ())
    assert again.lookup("c: 1\n") is None
