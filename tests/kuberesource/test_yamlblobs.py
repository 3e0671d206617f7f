"""Long base64 blobs are set aside while ruamel parses, and the result is ruamel's own reading.

`yamlio.load_text` replaces each long blob with a short token, parses, and puts the blobs back
into the string values they belong to; wherever that might not give exactly what ruamel reads
from the original text, it parses the original instead. Each case here compares both readings:
content, types, and the text a changed document is written as.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml.error import YAMLError

from contrast.kuberesource import yamlio
from contrast.kuberesource.yamlblob import MINIMUM as BLOB_MINIMUM
from contrast.kuberesource.yamlio import load_text

BLOB = base64.b64encode(bytes(range(256)) * 5).decode()  # 1368 characters, with '/' and 'G'-'Z'
HEX = "ab" * BLOB_MINIMUM  # no character a number could not have: never set aside
assert len(BLOB) >= BLOB_MINIMUM


def _slow(text: str) -> list[Any]:
    return list(yamlio._yaml().load_all(text))


def _fast(text: str) -> tuple[Any, ...] | None:
    return yamlio._load_with_blobs_set_aside(text)


def _dumped(documents: Any) -> list[str]:
    texts = []
    for document in documents:
        stream = io.StringIO()
        yamlio._yaml().dump(document, stream)
        texts.append(stream.getvalue())
    return texts


def _types(value: Any) -> Any:
    if isinstance(value, dict):
        return [(type(k).__name__, _types(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_types(item) for item in value]
    return type(value).__name__


def assert_same_reading(text: str) -> None:
    slow = _slow(text)
    loaded = load_text(text, "blobs.yml")
    assert json.dumps([yamlio.to_plain(d) for d in loaded.documents]) == json.dumps(
        [yamlio.to_plain(d) for d in slow]
    )
    assert _types(list(loaded.documents)) == _types(slow)
    assert _dumped(loaded.documents) == _dumped(slow)


TAKEN = {
    "plain value": f"metadata:\n  annotations:\n    initdata: {BLOB}\n",
    "double quoted": f'data:\n  key: "{BLOB}"\n',
    "single quoted": f"data:\n  key: '{BLOB}'\n",
    "two in one file": f"a: {BLOB}\nb: x {BLOB} y\n---\nc: [1]\nd: {BLOB[::-1]}\n",
    "in a sequence": f"items:\n- {BLOB}\n- '{BLOB}'\n",
    "folded over lines": f"a: {BLOB}\n  {BLOB}\n",
}


@pytest.mark.parametrize("text", TAKEN.values(), ids=TAKEN.keys())
def test_blobs_in_string_values_are_set_aside_and_read_as_ruamel_reads_them(text: str) -> None:
    assert _fast(text) is not None
    assert_same_reading(text)


PASSED_OVER = {
    "a key": f"{BLOB}: 1\n",
    "a comment": f"a: 1  # {BLOB}\nb: {BLOB}\n",
    "a comment line": f"# {BLOB}\na: {BLOB}\n",
    "binary tag": f"a: !!binary {BLOB}\n",
    "custom tag": f"a: !blob {BLOB}\n",
    "anchored and aliased": f"a: &x {BLOB}\nb: *x\n",
    "anchored quoted": f'a: &x "{BLOB}"\n',
    "merged": f"base: &b\n  k: {BLOB}\nderived:\n  <<: *b\n  j: 1\n",
    "literal block": f"a: |\n  {BLOB}\n  next\n",
    "folded scalar": f"a: >\n  {BLOB}\n  more\n",
    "flow sequence": f"a: [{BLOB}, 2]\n",
    "invalid afterwards": f"a: {BLOB}\nb: [\n",
}


@pytest.mark.parametrize("text", PASSED_OVER.values(), ids=PASSED_OVER.keys())
def test_where_setting_aside_could_differ_ruamel_reads_the_text_itself(text: str) -> None:
    try:
        _slow(text)
    except YAMLError:  # a plain key is at most 1024 characters: a token would pass as one
        assert _fast(text) is None
        with pytest.raises(yamlio.YamlError, match=r"blobs\.yml"):
            load_text(text, "blobs.yml")
        return
    fast = _fast(text)
    if fast is not None:  # taken after all: then it must agree
        assert _dumped(fast) == _dumped(_slow(text))
    assert_same_reading(text)


@pytest.mark.parametrize(
    "value",
    [HEX, "1" * 2000, "0o" + "7" * 2000, "0x" + "f" * 2000, "1e+" + "1" * 2000],
    ids=["hex letters", "digits", "octal", "hexadecimal", "float"],
)
def test_runs_a_number_could_be_are_never_set_aside(value: str) -> None:
    text = f"a: {value}\n"
    assert _fast(text) is None
    assert_same_reading(text)


def test_a_token_already_in_the_text_is_no_problem() -> None:
    text = f"a: {BLOB}\nb: contrastblob\n"
    assert_same_reading(text)


PIECES = st.sampled_from(
    [BLOB, BLOB[:-4] + "////", "'", '"', " ", "\n", "\n  ", ": ", "- ", "# ", "&a ", "*a",
     "!!str ", "[", "]", "{", "}", ", ", "x", "---\n", "|\n  ", ">\n  ", "<<: "]
)  # fmt: skip


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(pieces=st.lists(PIECES, min_size=1, max_size=12))
def test_any_text_reads_as_ruamel_reads_it(pieces: list[str]) -> None:
    text = "".join(pieces)
    try:
        slow = _slow(text)
    except Exception:
        with pytest.raises((yamlio.YamlError, yamlio.ResourceError)):
            load_text(text, "blobs.yml")
        return
    fast = _fast(text)
    if fast is not None:
        assert json.dumps([yamlio.to_plain(d) for d in fast]) == json.dumps(
            [yamlio.to_plain(d) for d in slow]
        )
        assert _types(list(fast)) == _types(slow)
        assert _dumped(fast) == _dumped(slow)


VALUES = st.sampled_from(
    [BLOB, f"'{BLOB}'", f'"{BLOB}"', f"x {BLOB}", f"{BLOB} # {BLOB}", f"!!binary {BLOB}",
     f"&a {BLOB}", "*a", f"[{BLOB}]", f"|\n    {BLOB}", f">\n    {BLOB}", f"{BLOB}\n    {BLOB}",
     HEX, "yes", "0o17", "", "{}", f"- {BLOB}\n  - b"]
)  # fmt: skip
LINES = st.tuples(st.sampled_from(["", "  "]), st.sampled_from(["a", "b", "c", "d"]), VALUES)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(lines=st.lists(LINES, min_size=1, max_size=8), separators=st.lists(st.booleans()))
def test_any_document_of_blob_values_reads_as_ruamel_reads_it(
    lines: list[tuple[str, str, str]], separators: list[bool]
) -> None:
    text = ""
    for number, (indent, key, value) in enumerate(lines):
        if number < len(separators) and separators[number]:
            text += "---\n"
        text += f"{indent}{key}{number}: {value}\n"
    try:
        _slow(text)
    except YAMLError:
        with pytest.raises(yamlio.ResourceError):
            load_text(text, "blobs.yml")
        return
    assert_same_reading(text)


@pytest.mark.parametrize(
    "text", [*TAKEN.values(), *PASSED_OVER.values()], ids=[*TAKEN, *PASSED_OVER]
)
def test_writing_with_blobs_set_aside_writes_what_ruamel_writes(text: str) -> None:
    try:
        documents = _slow(text)
    except YAMLError:
        return
    source = yamlio._Source(text, "")
    for document in documents:
        if isinstance(document, dict):
            document["added"] = BLOB  # a new blob, as generate adds an initdata annotation
        assert yamlio._serialise(document, source) == yamlio._dump(document, source)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(lines=st.lists(LINES, min_size=1, max_size=8))
def test_any_document_of_blob_values_is_written_as_ruamel_writes_it(
    lines: list[tuple[str, str, str]],
) -> None:
    text = "".join(
        f"{indent}{key}{number}: {value}\n" for number, (indent, key, value) in enumerate(lines)
    )
    try:
        documents = _slow(text)
    except YAMLError:
        return
    source = yamlio._Source(text, "")
    for document in documents:
        assert yamlio._serialise(document, source) == yamlio._dump(document, source)
