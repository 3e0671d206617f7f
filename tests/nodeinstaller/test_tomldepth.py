"""The TOML depth bound: exact on real documents, and a deep containerd config is one clear error.

tomllib recursed per nested array or inline table ("internal error: RecursionError" from
`contrast node-installer`), and a long dotted key or table header cost it memory quadratic in its
parts (issue 24, item 8). The bound is counted lexically before parsing; here it is held to the
nesting of the parsed document on generated TOML, strings full of brackets, quotes and dots
included.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast.cli.main import main
from contrast.nodeinstaller.standins import write_standins
from contrast.nodeinstaller.tomldepth import MAX_DEPTH, TomlTooDeep, check_depth, loads
from contrast.platforms import by_name
from tests.nodeinstaller.conftest import snapshot
from tests.nodeinstaller.test_containerdconfig import V2_USER_CONFIG

DEEP = 3000
NESTINGS = {
    "arrays": "deep = " + "[" * DEEP + "]" * DEEP + "\n",
    "inline tables": "deep = " + "{ a = " * DEEP + "1" + " }" * DEEP + "\n",
    "dotted key": ".".join(["a"] * DEEP) + " = 1\n",
    "table header": "[" + ".".join(["a"] * DEEP) + "]\nx = 1\n",
}


def levels(node: Any) -> int:
    """How many containers deep a parsed document goes (a key with a scalar is one level)."""
    deepest, stack = 0, [(node, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth + 1)
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return deepest


def lexical(text: str) -> int:
    """The depth the bound counts: the largest limit the text is refused under, plus one."""
    low, high = 0, 4 * MAX_DEPTH
    while low < high:
        middle = (low + high) // 2
        try:
            check_depth(text, middle)
            high = middle
        except TomlTooDeep:
            low = middle + 1
    return low


@pytest.mark.parametrize("nesting", sorted(NESTINGS))
def test_a_deeply_nested_containerd_config_is_one_clear_error(
    host_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], nesting: str
) -> None:
    (host_root / "etc/containerd/config.toml").write_text(V2_USER_CONFIG + NESTINGS[nesting])
    artefacts = tmp_path / "standins"
    write_standins(by_name("metal-qemu-snp"), artefacts)
    before = snapshot(host_root)
    arguments = [
        "node-installer", "--host-root", str(host_root), "--platform", "metal-qemu-snp",
        "--artefacts", str(artefacts), "--no-restart",
    ]  # fmt: skip
    assert main(arguments) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert (
        f"containerd config /etc/containerd/config.toml is nested more than {MAX_DEPTH} levels"
        in err
    )
    assert "internal error" not in err
    assert snapshot(host_root) == before


SAMPLES = {
    "a = 1": 1,
    "a.b.c = 1": 3,
    "[a.b]\nc = 1": 3,
    "[[a]]\nb = 1": 3,
    "a = [1, [2, [3]]]": 4,
    "a = {b = {c = 1}}": 3,
    "a = '[[[' # [[[[ {{{\n": 1,
    "a = '''[[[\n]]]''''": 1,
    'a = """x\\"""[[[""""': 1,
    'a = "\\"[[[\\\\" # ]]]': 1,
    "x = 1.5\ny = [1.5, 2.5e-3]\nt = 1979-05-27T07:32:00.999999Z": 2,
    '[a]\n[a.b.c]\nd.e = {f = [1, {g = 2}]}\n"h.i".j = 1': 8,
    "a = [\n  1, # ,{[\n  [2],\n]\nb.c.d = 1": 3,
}


@pytest.mark.parametrize("text", list(SAMPLES))
def test_the_count_is_the_documents_nesting(text: str) -> None:
    assert levels(tomllib.loads(text)) == SAMPLES[text] == lexical(text)


SCALARS = st.one_of(
    st.integers(), st.floats(allow_nan=False), st.booleans(),
    st.text(alphabet=st.sampled_from("ab.[]{}\"'#=,\n\\ ")),
)  # fmt: skip
KEYS = st.text(alphabet=st.sampled_from("ab.[]{}\"'#=, "), min_size=1, max_size=4)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
DOCUMENTS = st.dictionaries(KEYS, VALUES, max_size=4)


@settings(max_examples=300, deadline=None)
@given(document=DOCUMENTS, multiline=st.booleans())
def test_the_count_bounds_the_nesting_of_any_document(
    document: dict[str, Any], multiline: bool
) -> None:
    """Never below the document's nesting but for arrays of tables inside arrays of tables
    (each of which is two levels in the document and one in the count), never above it."""
    text = tomli_w.dumps(document, multiline_strings=multiline)
    parsed = tomllib.loads(text)
    counted, nested = lexical(text), levels(parsed)
    assert nested <= 2 * counted
    assert counted <= max(nested, 1)
    if "[[" not in text:
        assert counted >= nested


def test_a_huge_nesting_is_refused_in_one_pass() -> None:
    text = V2_USER_CONFIG + "[" + ".".join(["a"] * 1_000_000) + "]\n" + "x = [" * 1_000_000
    started = time.perf_counter()
    with pytest.raises(TomlTooDeep, match=f"nested more than {MAX_DEPTH} levels deep"):
        loads(text)
    assert time.perf_counter() - started < 1.0
