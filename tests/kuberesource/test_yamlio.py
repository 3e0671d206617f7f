"""YAML streams round-trip byte for byte when untouched and keep comments when changed."""

from __future__ import annotations

import io
import itertools
import json
import re
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from contrast.kuberesource import yamlio
from contrast.kuberesource.yamlio import Indentation, YamlError, guess_indentation, load_text

TESTDATA = Path(__file__).parent / "testdata"
FILES = sorted(TESTDATA.glob("*.y*ml"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_untouched_files_round_trip_byte_for_byte(path: Path) -> None:
    resources = yamlio.load(path)
    assert not resources.changed
    assert resources.dump() == path.read_text()
    assert resources.write() is False


def test_kustomize_build_documents_and_workloads() -> None:
    resources = yamlio.load(TESTDATA / "kustomize-build.yml")
    assert [d["kind"] for d in resources.documents] == [
        "Namespace", "ConfigMap", "Service", "Deployment", "CronJob",
    ]  # fmt: skip
    assert [w.describe() for w in resources.workloads()] == [
        f"{TESTDATA / 'kustomize-build.yml'}: Deployment/web",
        f"{TESTDATA / 'kustomize-build.yml'}: CronJob/report",
    ]


def test_a_changed_document_keeps_comments_and_the_others_their_bytes() -> None:
    path = TESTDATA / "helm-template.yaml"
    original = path.read_text()
    resources = yamlio.load(path)
    assert resources.documents[1] is None  # the template that rendered nothing
    (statefulset,) = resources.workloads()
    statefulset.pod_spec["runtimeClassName"] = "contrast-cc-metal-qemu-snp-12345678"
    assert resources.changed_documents() == [3]
    text = resources.dump()
    assert text != original
    before, _, _ = original.partition("# Source: shop/templates/statefulset.yaml")
    assert text.startswith(before)  # the first three documents, untouched, byte for byte
    for kept in [
        "# Source: shop/templates/statefulset.yaml",
        "# The sidecar terminates TLS for the API and lets metrics through in plain text.",
        '  args: ["--listen", ":8001"]   # flow style, kept',
        '"main#8001#false##metrics#8080#true"',
        "      runtimeClassName: contrast-cc-metal-qemu-snp-12345678\n",
        "        - name: api\n",  # helm's sequence indentation
    ]:
        assert kept in text, kept
    assert [line for line in text.splitlines() if "runtimeClassName" not in line] == [
        line for line in original.splitlines() if "runtimeClassName" not in line
    ]


def test_kustomize_style_sequences_stay_unindented_when_changed() -> None:
    resources = yamlio.load(TESTDATA / "kustomize-build.yml")
    deployment = resources.workloads()[0]
    deployment.pod_spec["containers"][0]["image"] = "docker.io/library/nginx:1.28"
    text = resources.dump()
    assert "      containers:\n      - envFrom:\n        - configMapRef:\n" in text
    assert (
        text.replace("nginx:1.28", "nginx:1.27") == (TESTDATA / "kustomize-build.yml").read_text()
    )


def test_write_in_place_only_when_changed_and_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "app.yml"
    path.write_text((TESTDATA / "gpu-pod.yml").read_text())
    path.chmod(0o600)
    inode = path.stat().st_ino
    assert yamlio.load(path).write() is False
    assert path.stat().st_ino == inode  # not even replaced by an identical copy
    resources = yamlio.load(path)
    resources.workloads()[0].pod_spec["restartPolicy"] = "OnFailure"
    assert resources.write() is True
    assert "restartPolicy: OnFailure" in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert yamlio.load(path).write() is False


def test_stdin_to_stdout() -> None:
    text = (TESTDATA / "multi-runtime.yml").read_text()
    (resources,) = yamlio.load_paths(["-"], stdin=io.StringIO(text))
    assert resources.name == "<stdin>"
    out = io.StringIO()
    resources.write(stdout=out)
    assert out.getvalue() == text


def test_directories_are_walked_sorted_for_yaml_only(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    for name in ["b/z.yaml", "a.yml", "c.json", "b/a.yml", ".git/x.yml", "manifest.json"]:
        (tmp_path / name).write_text("kind: ConfigMap\n")
    files = yamlio.load_paths([tmp_path])
    assert [Path(f.path).relative_to(tmp_path).as_posix() for f in files] == [
        "a.yml", "b/a.yml", "b/z.yaml",
    ]  # fmt: skip


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n---\nkind: X\n")
    with pytest.raises(YamlError) as error:
        yamlio.load(path)
    assert str(path) in str(error.value)
    assert "line " in str(error.value)
    with pytest.raises(YamlError, match=r"line 2"):
        load_text("a: 1\na: 2\n", "dup.yml")


def test_a_control_character_is_one_line() -> None:
    with pytest.raises(YamlError) as error:
        load_text("\x1fkind: Pod\n", "odd.yml")
    message = error.value.explain()
    assert "\n" not in message
    assert message.startswith("odd.yml: unacceptable character #x001f")


def test_unreadable_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(YamlError, match="cannot read"):
        yamlio.load(tmp_path / "missing.yml")
    (tmp_path / "bin.yml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(YamlError, match="not UTF-8"):
        yamlio.load(tmp_path / "bin.yml")


def test_list_items_are_workloads_and_editable() -> None:
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: a\n"
        "  spec:\n    containers:\n    - name: a\n      image: busybox\n"
        "- apiVersion: v1\n  kind: Service\n  metadata:\n    name: s\n"
    )
    resources = load_text(text, "list.yml")
    (pod,) = resources.workloads()
    assert pod.name == "a"
    pod.pod_spec["runtimeClassName"] = "contrast-cc"
    assert "    runtimeClassName: contrast-cc\n" in resources.dump()
    assert "  kind: Service\n" in resources.dump()


def test_to_plain_is_json_compatible_and_keeps_order() -> None:
    text = (
        "b: 'quoted'\na: &anchor 1\nc: *anchor\nd: [true, 1.5, null, 2024-01-02]\n"
        "e: !custom tagged\nf: 0x10\n"
    )
    plain = yamlio.to_plain(load_text(text).documents[0])
    assert list(plain) == ["b", "a", "c", "d", "e", "f"]
    assert plain == {
        "b": "quoted", "a": 1, "c": 1, "d": [True, 1.5, None, "2024-01-02"], "e": "tagged",
        "f": 16,
    }  # fmt: skip
    assert [type(plain[key]) for key in ("b", "a", "f")] == [str, int, int]
    assert type(plain["d"][0]) is bool
    json.dumps(plain)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a:\n  b:\n  - c\n", Indentation(2, 2, 0)),
        ("a:\n  b:\n    - c: 1\n      d:\n        - e\n", Indentation(2, 4, 2)),
        ("a:\n    b:\n        - c\n", Indentation(4, 6, 4)),
        ("- a:\n    b: 1\n", Indentation(2, 2, 0)),
        ("", Indentation(2, 2, 0)),
    ],
)
def test_guess_indentation(text: str, expected: Indentation) -> None:
    assert guess_indentation(text) == expected


def test_empty_and_comment_only_streams() -> None:
    for text in ["", "# nothing here\n", "---\n", "---\n# a\n---\n# b\n"]:
        resources = load_text(text, "x.yml")
        assert resources.dump() == text
        assert resources.workloads() == []


_keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=8)
_scalars = st.one_of(
    st.integers(-1000, 1000), st.booleans(), st.none(),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20),
)  # fmt: skip
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_keys, children, max_size=3),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(_keys, _values, min_size=1, max_size=4), min_size=1, max_size=3))
def test_any_stream_round_trips(documents: list[dict[str, object]]) -> None:
    stream = io.StringIO()
    YAML().dump_all(documents, stream)
    text = stream.getvalue()
    resources = load_text(text, "gen.yml")
    assert resources.dump() == text
    assert [yamlio.to_plain(d) for d in resources.documents] == documents
    resources.documents[-1]["added"] = "x"
    assert yamlio.to_plain(load_text(resources.dump()).documents[-1])["added"] == "x"


def test_write_errors_are_contrast_errors(tmp_path: Path) -> None:
    path = tmp_path / "a.yml"
    path.write_text("kind: Pod\nmetadata:\n  name: a\nspec: {}\n")
    resources = yamlio.load(path)
    resources.documents[0]["spec"]["runtimeClassName"] = "x"
    path.unlink()
    path.mkdir()  # replacing a directory by a file fails, also for root
    with pytest.raises(YamlError, match="cannot write"):
        resources.write()


@pytest.mark.parametrize(
    "text",
    [
        "%YAML 1.2\n---\nkind: Pod # a\nspec: {}\n...\n---\nkind: Service\n",
        "kind: Pod\nspec: {}\n...\n# between\nkind: Service\n",
        "a: |\n  ---\n  not a marker\n---\nkind: Pod\nspec: {}\n",
        "---\nkind: Pod\nspec: {}\n---\n",
    ],
)
def test_streams_with_markers_and_directives(text: str) -> None:
    resources = load_text(text, "x.yml")
    assert resources.dump() == text
    (pod,) = resources.workloads()
    pod.pod_spec["runtimeClassName"] = "contrast-cc"
    changed = load_text(resources.dump(), "x.yml")
    assert [yamlio.to_plain(d) for d in changed.documents] == [
        yamlio.to_plain(d) for d in resources.documents
    ]
    assert "# a" in changed.dump() or "# a" not in text


def test_combined_output(tmp_path: Path) -> None:
    files = [yamlio.load(TESTDATA / "kustomize-build.yml"), yamlio.load(TESTDATA / "gpu-pod.yml")]
    text = yamlio.combined(files)
    assert [d["kind"] for d in yamlio.load_text(text).documents] == [
        "Namespace", "ConfigMap", "Service", "Deployment", "CronJob", "Pod",
    ]  # fmt: skip
    output = tmp_path / "out.yml"
    assert yamlio.write_combined(files, output) is True
    assert output.read_text() == text
    assert yamlio.write_combined(files, output) is False
    out = io.StringIO()
    assert yamlio.write_combined(files, "-", stdout=out) is True
    assert out.getvalue() == text


# Lines made of the pieces that decide where documents start and end, among others.
_MARKER_LINES = st.lists(
    st.sampled_from(
        ["---", "--- ", "---\t", "---x", " ---", "...", "... ", "...x", "%YAML 1.2", " %", "a: 1"]
    ).map(lambda line: line + "\n")
    | st.text(alphabet="-.% \tab:\n", max_size=12),
    max_size=8,
).map("".join)


@given(text=_MARKER_LINES, marker=st.sampled_from(["---", "...", "%"]))
def test_a_line_begins_with_a_marker_where_a_multiline_regex_finds_it(
    text: str, marker: str
) -> None:
    """The substring test before the marker regexes answers as `^marker` with MULTILINE."""
    found = re.search(f"^{re.escape(marker)}", text, re.MULTILINE) is not None
    assert yamlio._begins_a_line(text, marker) is found


def _split_by_regex(text: str, count: int) -> list[str] | None:
    """`_split_at_markers` as it was, with the regexes alone."""
    if re.search(r"^(?:\.\.\.|%)", text, re.MULTILINE):
        return None
    starts = [match.start() for match in yamlio._DOCUMENT_START.finditer(text)]
    boundaries = [0, *(start for start in starts if start > 0), len(text)]
    texts = [text[start:end] for start, end in itertools.pairwise(boundaries)]
    if texts and not texts[0].startswith("---") and not yamlio._has_content(texts[0]):
        if len(texts) == 1:
            return [] if count == 0 else None
        texts[1] = texts[0] + texts[1]
        del texts[0]
    return texts if len(texts) == count else None


@given(text=_MARKER_LINES, count=st.integers(0, 4))
def test_streams_split_at_markers_as_with_the_regexes_alone(text: str, count: int) -> None:
    assert yamlio._split_at_markers(text, count) == _split_by_regex(text, count)


def test_plain_ascii_is_printable_ascii_and_newlines() -> None:
    """What a written text must be made of to be remembered (ruamel folds a NEL into a space)."""
    from contrast.kuberesource.yamlio import _is_plain_ascii

    for code in range(0x300):
        character = chr(code)
        plain = character == "\n" or 0x20 <= code <= 0x7E
        assert _is_plain_ascii(f"a: b{character}c\n") is plain, hex(code)
    assert _is_plain_ascii("")
    assert not _is_plain_ascii("a: '\x85'\n")
