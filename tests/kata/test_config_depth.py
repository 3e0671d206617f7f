"""A Kata configuration nested too deeply is one clear refusal of `runtime build` (issue 24, 8).

tomllib recursed per nested array or inline table into "internal error: RecursionError", and a
long dotted key cost it memory quadratic in its parts; the release's configuration is refused
before any parser reads it, naming the file and the bound.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contrast.cli.main import main
from contrast.kata import config
from contrast.kata.errors import KataReleaseError
from contrast.nodeinstaller.tomldepth import MAX_DEPTH
from contrast.platforms import by_name
from tests.kata import synthetic

CONFIG = "share/defaults/kata-containers/configuration-qemu-snp.toml"
DEEP = 3000

NESTINGS = {
    "arrays": "deep = " + "[" * DEEP + "]" * DEEP + "\n",
    "inline tables": "deep = " + "{ a = " * DEEP + "1" + " }" * DEEP + "\n",
    "dotted key": ".".join(["a"] * DEEP) + " = 1\n",
    "table header": "[" + ".".join(["a"] * DEEP) + "]\nx = 1\n",
}


@pytest.mark.parametrize("nesting", sorted(NESTINGS))
def test_a_deeply_nested_kata_configuration_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nesting: str
) -> None:
    tree = synthetic.files()
    tree[CONFIG] = (synthetic.config("snp") + NESTINGS[nesting]).encode()
    release = synthetic.write_tree(tmp_path / "release", tree)
    workspace = tmp_path / "workspace"
    argv = [
        "runtime", "build", "--kata-release", str(release), "--output", str(workspace),
        "--platform", "metal-qemu-snp",
    ]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"/opt/kata/{CONFIG} is nested more than {MAX_DEPTH} levels deep" in err
    assert "internal error" not in err
    assert not workspace.exists() or list(workspace.iterdir()) == []


def test_the_bound_admits_its_own_depth_and_refuses_one_more() -> None:
    at_bound = ".".join(["a"] * MAX_DEPTH) + " = 1\n"
    assert config.parse(at_bound, "c.toml")["a"]["a"]
    with pytest.raises(KataReleaseError, match=rf"c\.toml is nested more than {MAX_DEPTH} levels"):
        config.parse("b." + at_bound, "c.toml")


def test_a_huge_dotted_key_is_refused_at_once() -> None:
    """One million parts (2 MB): tomllib was killed for memory at a tenth of that."""
    text = synthetic.config("snp") + ".".join(["a"] * 1_000_000) + " = 1\n"
    started = time.perf_counter()
    with pytest.raises(KataReleaseError, match="nested more than"):
        config.parse(text, "c.toml")
    assert time.perf_counter() - started < 1.0


def test_render_refuses_what_parse_refuses() -> None:
    text = synthetic.config("snp") + NESTINGS["arrays"]
    with pytest.raises(KataReleaseError, match=r"c\.toml is nested more than"):
        config.render(text, "c.toml", by_name("metal-qemu-snp"), lambda path: path)
