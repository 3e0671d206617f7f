"""`yamlrtload` and `yamlrtdump` against ruamel: the same tree, the same text, or a decline.

Both stand in for ruamel's round-trip code on the documents `generate` changes, so each is
compared with ruamel itself: on the examples, on generated workloads, and on random trees with
every scalar style, flow and block collections and awkward strings (YAML 1.1 booleans, numbers
in quotes, indicators, quotes inside quotes, non-ASCII). A decline is always allowed (the caller
then uses ruamel); a different tree or text never is.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

from contrast.kuberesource import yamlio, yamlrtdump, yamlrtload

EXAMPLES = Path(__file__).parents[1] / "generate" / "examples"
INDENTATIONS = [
    yamlio.Indentation(2, 2, 0),
    yamlio.Indentation(2, 4, 2),
    yamlio.Indentation(4, 4, 2),
]

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, tier: "front"}
spec:
  replicas: 0
  template:
    spec:
      runtimeClassName: contrast-cc
      containers:
        - name: web
          image: 'nginx:1.27'
          args: ["--port", "8080", "--debug", 'true']
          ports:
            - containerPort: 8080
          env: []
          securityContext: {}
          readOnly: false
"""


def _ruamel_load(text: str) -> Any:
    (document,) = yamlio._yaml().load_all(text)
    return document


def _ruamel_dump(document: Any, indentation: yamlio.Indentation, explicit_start: bool) -> str:
    yaml = yamlio._yaml(indentation)
    yaml.explicit_start = explicit_start
    stream = io.StringIO()
    yaml.dump(document, stream)
    return stream.getvalue()


def _difference(fast: Any, reference: Any, path: str = "$") -> str | None:
    """Where two round-trip trees differ in type, value, key order or collection style."""
    if type(fast) is not type(reference):
        return f"{path}: {type(fast).__name__} vs {type(reference).__name__}"
    flow, other = (getattr(node, "fa", None) for node in (fast, reference))
    if flow is not None and other is not None and flow._flow_style != other._flow_style:
        return f"{path}: flow style {fast.fa._flow_style} vs {reference.fa._flow_style}"
    if isinstance(fast, CommentedMap):
        if [(type(k), k) for k in fast] != [(type(k), k) for k in reference]:
            return f"{path}: keys {list(fast)} vs {list(reference)}"
        for key in fast:
            found = _difference(fast[key], reference[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(fast, CommentedSeq):
        if len(fast) != len(reference):
            return f"{path}: {len(fast)} vs {len(reference)} items"
        for index, (item, other) in enumerate(zip(fast, reference, strict=True)):
            found = _difference(item, other, f"{path}[{index}]")
            if found:
                return found
        return None
    if fast != reference or getattr(fast, "_width", None) != getattr(reference, "_width", None):
        return f"{path}: {fast!r} vs {reference!r}"
    return None


def _example_documents() -> list[str]:
    texts = []
    for path in sorted(EXAMPLES.rglob("*.y*ml")):
        file = yamlio.load_text(path.read_text(), path)
        texts.extend(source.text for source in file._sources)
    return texts


# ---------------------------------------------------------------------------------------------
# Random trees: what users write, with the strings that make emitters choose other styles.

AWKWARD = [
    "true",
    "false",
    "True",
    "yes",
    "no",
    "on",
    "off",
    "null",
    "~",
    "",
    " ",
    "8080",
    "0",
    "007",
    "1.5",
    "1e3",
    "0x1F",
    "0o17",
    "1_000",
    "12:30",
    "2001-12-14",
    ".inf",
    "-",
    "--flag",
    "-x",
    "a: b",
    "a:b",
    "a #b",
    "a#b",
    "#a",
    "&a",
    "*a",
    "!a",
    "|",
    ">",
    "%a",
    "@a",
    "`a",
    "'a",
    '"a',
    "it's",
    'say "hi"',
    "[a]",
    "{a}",
    "a, b",
    "a,b",
    "?a",
    "? a",
    ":a",
    "a:",
    " lead",
    "trail ",
    "two  spaces",
    "tab\there",
    "line\nbreak",
    "ünïcode",
    "back\\slash",
    "---",
    "...",
    "=",
    "<<",
    "ghcr.io/x/y:1.0@sha256:" + "ab" * 32,
    "api#8080#false",
    "a" * 200,
    "Memory",
    "50Mi",
    "H4sI" + "A" * 1100 + "/=",  # a blob (an initdata annotation)
    "/" + "a" * 1100,
    "1" * 1100,  # long, but a number
]
_words = st.sampled_from(["name", "image", "app", "x", "value", "ports", "a-b", "a.b/c", "k8s"])
_strings = st.one_of(st.sampled_from(AWKWARD), _words, st.text(max_size=12))


@st.composite
def _scalars(draw: st.DrawFn, *, exotic: bool) -> Any:
    """A scalar; `exotic` adds nulls and floats (which both modules decline)."""
    kinds = ["plain", "plain", "double", "single", "int", "bool"]
    kind = draw(st.sampled_from([*kinds, "none", "float"] if exotic else kinds))
    if kind == "int":
        return draw(st.integers(-(10**6), 10**6))
    if kind == "bool":
        return draw(st.booleans())
    if kind == "none":
        return None
    if kind == "float":
        return draw(st.sampled_from([0.5, 1.25, -3.0]))
    text = draw(_strings)
    if kind == "double":
        return DoubleQuotedScalarString(text)
    if kind == "single":
        return SingleQuotedScalarString(text)
    return text


def _collections(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    def mapping(items: list[tuple[str, Any]], flow: bool, commented: bool) -> Any:
        node = CommentedMap() if commented else {}
        for key, value in items:
            node[key] = value
        if commented and flow:
            node.fa.set_flow_style()
        return node

    def sequence(items: list[Any], flow: bool, commented: bool) -> Any:
        node = CommentedSeq(items) if commented else list(items)
        if commented and flow:
            node.fa.set_flow_style()
        return node

    keys = st.one_of(_words, st.sampled_from(AWKWARD))
    return st.one_of(
        st.builds(
            mapping, st.lists(st.tuples(keys, children), max_size=4), st.booleans(), st.booleans()
        ),
        st.builds(sequence, st.lists(children, max_size=4), st.booleans(), st.booleans()),
    )


@st.composite
def _documents(draw: st.DrawFn) -> CommentedMap:
    exotic = draw(st.integers(0, 3)) == 0
    trees = st.recursive(_scalars(exotic=exotic), _collections, max_leaves=25)
    document = CommentedMap()
    for key, value in draw(st.lists(st.tuples(_words, trees), min_size=1, max_size=5)):
        document[key] = value
    return document


# ---------------------------------------------------------------------------------------------
# yamlrtload


@pytest.mark.parametrize("text", [DEPLOYMENT, *_example_documents()])
def test_loads_the_tree_ruamel_loads(text: str) -> None:
    fast = yamlrtload.load(text)
    if fast is not None:
        assert _difference(fast, _ruamel_load(text)) is None


def test_a_plain_deployment_is_loaded_fast() -> None:
    fast = yamlrtload.load(DEPLOYMENT)
    assert fast is not None
    image = fast["spec"]["template"]["spec"]["containers"][0]["image"]
    assert type(image) is SingleQuotedScalarString
    assert fast["metadata"]["labels"].fa.flow_style() is True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=_documents(), indentation=st.sampled_from(INDENTATIONS), start=st.booleans())
def test_random_documents_load_as_ruamel_loads_them(
    document: CommentedMap, indentation: yamlio.Indentation, start: bool
) -> None:
    try:
        text = _ruamel_dump(document, indentation, start)
        reference = _ruamel_load(text)
    except Exception:  # what ruamel cannot write or read back is no input here
        return
    fast = yamlrtload.load(text)
    if fast is not None:
        assert _difference(fast, reference) is None, text


DECLINED = {
    "comment": "a: 1  # one\n",
    "comment line": "# about a\na: 1\n",
    "blank line": "a: 1\n\nb: 2\n",
    "blank line with a tab": "a: 1\n \t\nb: 2\n",
    "blank line, CRLF": "a: 1\r\n\r\nb: 2\r\n",
    "CRLF": "a: 1\r\nb: 2\r\n",
    "anchor and alias": "a: &x 1\nb: *x\n",
    "tag": "a: !!str 1\n",
    "block scalar": "a: |\n  text\n",
    "folded plain scalar": "a: one\n  two\n",
    "null": "a:\n",
    "float": "a: 1.5\n",
    "hexadecimal": "a: 0x1F\n",
    "sign": "a: +1\n",
    "True": "a: True\n",
    "timestamp": "a: 2001-12-14\n",
    "merge": "a: {x: 1}\nb:\n  <<: {y: 2}\n",
    "duplicate key": "a: 1\na: 2\n",
    "complex key": "? [a]\n: 1\n",
    "document end": "a: 1\n...\n",
    "directive": "%YAML 1.2\n---\na: 1\n",
    "two documents": "a: 1\n---\nb: 2\n",
    "not YAML": "a: [1,\n",
    # libyaml's marks do not count a byte order mark, so the checks between tokens would look
    # one character off (a random text found it: ruamel keeps the blank line).
    "byte order mark, blank lines": "\ufeff\n\nname: 'true'\n",
    "byte order mark": "\ufeffa: 1\n",
}


@pytest.mark.parametrize("text", DECLINED.values(), ids=DECLINED.keys())
def test_what_only_ruamel_reads_in_full_is_declined(text: str) -> None:
    assert yamlrtload.load(text) is None


# ---------------------------------------------------------------------------------------------
# yamlrtdump


def _dump(document: Any, indentation: yamlio.Indentation, start: bool = False) -> str | None:
    return yamlrtdump.dump(
        document,
        mapping=indentation.mapping,
        sequence=indentation.sequence,
        offset=indentation.offset,
        explicit_start=start,
    )


@pytest.mark.parametrize("indentation", INDENTATIONS, ids=str)
@pytest.mark.parametrize("text", [DEPLOYMENT, *_example_documents()])
def test_writes_the_text_ruamel_writes(text: str, indentation: yamlio.Indentation) -> None:
    document = _ruamel_load(text)
    written = _dump(document, indentation)
    if written is not None:
        assert written == _ruamel_dump(document, indentation, False)


def test_a_deployment_with_injected_parts_is_written_here() -> None:
    document = yamlrtload.load(DEPLOYMENT)
    pod = document["spec"]["template"]["spec"]
    pod["runtimeClassName"] = "contrast-cc-emulated-snp-0123abcd"
    pod["initContainers"] = [{"name": "init", "env": [{"name": "X", "value": "true"}]}]
    pod["volumes"] = [{"name": "v", "emptyDir": {"medium": "Memory"}}]
    indentation = yamlio.guess_indentation(DEPLOYMENT)
    written = _dump(document, indentation, start=True)
    assert written is not None
    assert written == _ruamel_dump(document, indentation, True)
    assert "value: 'true'" in written


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=_documents(), indentation=st.sampled_from(INDENTATIONS), start=st.booleans())
def test_random_documents_are_written_as_ruamel_writes_them(
    document: CommentedMap, indentation: yamlio.Indentation, start: bool
) -> None:
    try:
        reference = _ruamel_dump(document, indentation, start)
    except Exception:  # what ruamel cannot write is no input here
        return
    written = _dump(document, indentation, start)
    if written is not None:
        assert written == reference


def test_writes_most_random_documents_itself() -> None:
    """The fast path is taken: a writer that declined everything would pass the test above."""
    written = 0
    for seed in range(200):
        if _dump(_plain_tree(seed), INDENTATIONS[seed % 3]) is not None:
            written += 1
    assert written > 150


def _plain_tree(seed: int) -> CommentedMap:
    document = CommentedMap()
    document["name"] = f"service-{seed}"
    document["spec"] = {"ports": [{"port": seed, "name": DoubleQuotedScalarString("p")}]}
    document["args"] = CommentedSeq(["--a", SingleQuotedScalarString(str(seed))])
    if seed % 2:
        document["args"].fa.set_flow_style()
    return document


DUMP_DECLINED = {
    "comment": "a: 1  # one\n",
    "null": "a:\n",
    "float": "a: 1.5\n",
    "anchor": "a: &x {b: 1}\nc: *x\n",
    "block scalar": "a: |\n  text\n",
    "multi-line string": 'a: "one\\ntwo"\n',
    "escape": 'a: "tab\\there"\n',
    "sequence in a sequence": "a:\n- - 1\n",
    "tag": "a: !x {b: 1}\n",
}


@pytest.mark.parametrize("text", DUMP_DECLINED.values(), ids=DUMP_DECLINED.keys())
def test_what_only_ruamel_writes_right_is_declined(text: str) -> None:
    assert _dump(_ruamel_load(text), yamlio.Indentation()) is None


def test_the_same_mapping_twice_is_declined() -> None:
    """ruamel writes an anchor and an alias for it."""
    shared = {"medium": "Memory"}
    assert _dump(CommentedMap(a=shared, b=shared), yamlio.Indentation()) is None


DISTURBANCES = ["\r\n", "\n\n", "  ", " ", "\t", "# c", " # c", "\ufeff", "   \n", "\n ", "'"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    document=_documents(),
    indentation=st.sampled_from(INDENTATIONS),
    disturbances=st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from(DISTURBANCES)), min_size=1, max_size=3
    ),
)
def test_disturbed_text_loads_as_ruamel_loads_it(
    document: CommentedMap,
    indentation: yamlio.Indentation,
    disturbances: list[tuple[int, str]],
) -> None:
    """Text as people edit it (comments, blank lines, CRLF, odd spaces): the tree is ruamel's,
    and so is what ruamel writes from it (which shows comments and blank lines it kept)."""
    try:
        text = _ruamel_dump(document, indentation, False)
    except Exception:  # what ruamel cannot write is no input here
        return
    for where, disturbance in disturbances:
        position = where % (len(text) + 1)
        text = text[:position] + disturbance + text[position:]
    try:
        reference = _ruamel_load(text)
    except Exception:  # no longer one valid document
        return
    fast = yamlrtload.load(text)
    if fast is not None:
        assert _difference(fast, reference) is None, text
        written = _ruamel_dump(fast, indentation, False)
        assert written == _ruamel_dump(reference, indentation, False), text
