"""No function in `src/contrast` is longer than 80 lines (issue 27), checked from the code.

A function that long does several things whose names are missing; splitting it along its own
sections names them. Every module is parsed with `ast`; a function's length is its first line
(the `def`, decorators not counted) to its last, docstring and comments included. Methods and
nested functions count on their own, and a nested function's lines count in its parent too.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "contrast"
MAX_LINES = 80


def _long_functions() -> list[str]:
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    found.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.name} ({lines})")
    return found


def test_the_walk_measures_functions() -> None:
    """Guards the measure: a walk that found no function, or measured none, would pass."""
    tree = ast.parse("def f():\n" + "    x = 1\n" * 90)
    (function,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert function.end_lineno is not None
    assert function.end_lineno - function.lineno + 1 == 91
    assert any(SOURCE.rglob("*.py"))


def test_no_function_is_longer_than_80_lines() -> None:
    long = _long_functions()
    assert not long, f"functions over {MAX_LINES} lines (split them along their sections): {long}"
