"""The import layering of `src/contrast`, checked from the code: no package imports one above it.

Every module is parsed with `ast` and every `contrast` import in it is collected, those inside
functions included (an import moved into a function to dodge a cycle is still an arrow). Each
import maps to its package: the first name under `contrast` (`attestation`, `platforms`, ...).
`LAYERS` is the allowed order, the same table as docs/DESIGN.md's: a package may import only
packages of a lower layer, so a new upward import, or a new cycle, fails here with the file and
line that made it. `KNOWN_UPWARD` would list exceptions (there are none); the test also fails
when one of them is gone, so the list cannot outlive the arrows it excuses.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "contrast"

# Package (a folder or a top-level module of src/contrast) -> its layer. `__init__` is the package
# root (it holds `__version__`), `__main__` is `python -m contrast`.
LAYERS: dict[str, int] = {
    # 0: leaves, standard library and third-party only
    "__init__": 0,
    "distributions": 0,
    "errors": 0,
    "jsontext": 0,
    "logs": 0,
    "syncfs": 0,
    # 1-2: bounded reading of files and JSON; the runtime description; the CA and the seed
    "boundedfile": 1,
    "boundedjson": 1,
    "runtimedescription": 1,
    "ca": 1,
    "files": 2,
    "seed": 2,
    # 3: evidence, the history's store, images, the service mesh's configuration
    "attestation": 3,
    "history": 3,
    "images": 3,
    "servicemesh": 3,
    # 4-6: wire types, the platforms table, aTLS, the manifest, the initializer
    "api": 4,
    "platforms": 4,
    "atls": 5,
    "initializer": 6,
    "manifest": 6,
    # 7-9: the Coordinator, Kubernetes resources, image builds, policies, the client
    "coordinator": 7,
    "kuberesource": 7,
    "imagebuild": 8,
    "policy": 8,
    "client": 9,
    "emulatedruntime": 9,
    # 10-13: generate, the node installer, Kata releases, local runs, the CLI
    "generate": 10,
    "nodeinstaller": 10,
    "kata": 11,
    "local": 11,
    "cli": 12,
    "__main__": 13,
}

# Imports allowed to go up or round, as (importing package, imported package): none since issue
# 27. An entry must name an import that exists; a new one is a decision to write down here.
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()


def package_of(path: Path) -> str:
    return path.relative_to(SOURCE).parts[0].removesuffix(".py")


def _is_package(name: str) -> bool:
    return (SOURCE / name).is_dir() or (SOURCE / f"{name}.py").is_file()


def imported_packages(node: ast.AST) -> list[str]:
    """The `contrast` packages one import statement names ([] for any other import)."""
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        assert node.level == 0, "relative imports are not used here; the layering reads absolute"
        if node.module == "contrast":  # `from contrast import x`: x a package or a root name
            return [alias.name if _is_package(alias.name) else "__init__" for alias in node.names]
        modules = [node.module or ""]
    else:
        return []
    return [m.split(".")[1] for m in modules if m.startswith("contrast.")]


def imports() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> where ("path:line"), across packages only."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(SOURCE.rglob("*.py")):
        importer = package_of(path)
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for imported in imported_packages(node):
                if imported != importer:
                    found[importer, imported].append(f"{path.relative_to(SOURCE)}:{node.lineno}")
    return found


def test_every_package_has_a_layer() -> None:
    packages = {package_of(path) for path in SOURCE.rglob("*.py")}
    assert packages - LAYERS.keys() == set(), "a new package: give it a layer here and in DESIGN.md"
    assert LAYERS.keys() - packages == set(), "a package is gone: drop it here and in DESIGN.md"


def upward(found: dict[tuple[str, str], list[str]]) -> set[str]:
    """The imports of `found` that go to the importer's own layer or above, less the known."""
    return {
        f"{importer} (layer {LAYERS[importer]}) imports {imported} (layer {LAYERS[imported]})"
        f" at {', '.join(where)}"
        for (importer, imported), where in found.items()
        if LAYERS[imported] >= LAYERS[importer] and (importer, imported) not in KNOWN_UPWARD
    }


def test_no_package_imports_one_of_its_own_layer_or_above() -> None:
    assert upward(imports()) == set()


def test_the_known_upward_imports_still_exist() -> None:
    """When issue 27's refactor removes one, it must leave this list too."""
    assert KNOWN_UPWARD - imports().keys() == set()


def test_no_package_cycle_besides_the_known_ones() -> None:
    """Implied by the layers, checked on its own so a cycle is named as one."""
    graph: dict[str, set[str]] = defaultdict(set)
    for importer, imported in imports():
        if (importer, imported) not in KNOWN_UPWARD:
            graph[importer].add(imported)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(package: str, path: list[str]) -> None:
        state[package] = 1
        for imported in sorted(graph[package]):
            assert state.get(imported) != 1, f"import cycle: {' -> '.join([*path, imported])}"
            if imported not in state:
                visit(imported, [*path, imported])
        state[package] = 2

    for package in sorted(LAYERS):
        if package not in state:
            visit(package, [package])


def test_an_upward_import_inside_a_function_is_found() -> None:
    """The reader sees imports in function bodies (the way the last cycles were written), and
    such an import from a low package to a high one is refused, as one between equals is."""
    source = "def f():\n    from contrast.cli import main\n    import contrast.local.demo\n"
    found = [p for node in ast.walk(ast.parse(source)) for p in imported_packages(node)]
    assert found == ["cli", "local"]
    assert upward({("errors", "cli"): ["errors.py:9"]}) == {
        "errors (layer 0) imports cli (layer 12) at errors.py:9"
    }
    assert len(upward({("coordinator", "kuberesource"): ["coordinator/x.py:1"]})) == 1
    assert upward({("cli", "errors"): ["cli/main.py:1"]}) == set()
