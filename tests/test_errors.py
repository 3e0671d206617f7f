"""One exception hierarchy, checked from the code: every error class is under its package's root.

Every module of `src/contrast` is imported and every exception class defined in it collected.
A package (the first name under `contrast`, as in test_layering) has one root: the one class of
its own that derives directly from `errors.ContrastError`. Every public exception class of the
package must derive from that root, so that the CLI prints any of them as one line and a caller
catches a package's errors by one name. A second class directly under `ContrastError`, or a class
outside the hierarchy (a bare `Exception` or `ValueError` subclass), fails here with its module.

Private classes (`_Declined`, ...) are the exception: control flow inside one module, caught
there; the test checks that no other module names them, so none can escape as an error.

And every package raises only its own errors: each `raise` whose class the code tells (a class,
or the class a helper it calls constructs) is checked to be of the raising package, never
another package's nor the bare `ContrastError`.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

import contrast
from contrast.errors import ContrastError

SOURCE = Path(contrast.__file__).resolve().parent


def _modules() -> list[ModuleType]:
    """Every module of the package; `__main__` modules would run the CLI when imported."""
    names = [
        info.name
        for info in pkgutil.walk_packages(contrast.__path__, "contrast.")
        if not info.name.endswith("__main__") and not info.name.endswith("_pb2")
    ]
    return [contrast, *(importlib.import_module(name) for name in names)]


def _package(module_name: str) -> str:
    parts = module_name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for module in _modules():
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found.append(value)
    return found


def _describe(cls: type) -> str:
    bases = ", ".join(f"{base.__module__}.{base.__qualname__}" for base in cls.__bases__)
    return f"{cls.__module__}.{cls.__qualname__}({bases})"


def _roots(classes: list[type[BaseException]]) -> dict[str, list[type[BaseException]]]:
    roots: dict[str, list[type[BaseException]]] = defaultdict(list)
    for cls in classes:
        if ContrastError in cls.__bases__:
            roots[_package(cls.__module__)].append(cls)
    return roots


def test_the_walk_finds_the_known_families() -> None:
    """Guards the walk itself: an import that silently found nothing would pass every test."""
    names = {f"{cls.__module__}.{cls.__name__}" for cls in _exception_classes()}
    assert {
        "contrast.attestation.errors.ReferenceMismatch",
        "contrast.coordinator.errors.NotReady",
        "contrast.history.errors.HashMismatch",
        "contrast.kuberesource.yamlio.YamlError",
    } <= names
    assert len(names) > 100


def test_each_package_has_one_root() -> None:
    roots = _roots(_exception_classes())
    several = {
        package: [_describe(cls) for cls in classes]
        for package, classes in roots.items()
        if len(classes) > 1
    }
    assert not several, f"packages with more than one class directly under ContrastError: {several}"


def test_every_exception_derives_from_its_package_root() -> None:
    classes = _exception_classes()
    roots = _roots(classes)
    outside = []
    for cls in classes:
        if cls is ContrastError or cls.__name__.startswith("_"):
            continue
        package_roots = roots.get(_package(cls.__module__), [])
        if not any(issubclass(cls, root) for root in package_roots):
            outside.append(_describe(cls))
    assert not outside, (
        "exception classes not under their package's root (derive them from it, or give the"
        f" package one root under ContrastError): {sorted(outside)}"
    )


def _names_used_outside(module_name: str, name: str) -> list[str]:
    """Where a module other than `module_name` imports `name` from it, or reads `x.name`."""
    places = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE.parent).with_suffix("")
        if ".".join(relative.parts) == module_name:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            imported = isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names)
            if imported or (isinstance(node, ast.Attribute) and node.attr == name):
                places.append(f"{path.relative_to(SOURCE)}:{node.lineno}")
    return places


def test_private_exceptions_stay_in_their_module() -> None:
    """A private exception outside the hierarchy is only fine if it cannot reach a caller."""
    private = [cls for cls in _exception_classes() if cls.__name__.startswith("_")]
    assert private, "no private exception found: the exemption above is then not needed"
    escaped = {
        _describe(cls): places
        for cls in private
        if (places := _names_used_outside(cls.__module__, cls.__name__))
    }
    assert not escaped, f"private exceptions named outside their module: {escaped}"


def _packages() -> list[str]:
    """Every package as test_layering names them: a folder or a top-level module of contrast."""
    folders = [p.name for p in SOURCE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    modules = [p.stem for p in SOURCE.glob("*.py")]
    return sorted(folders + modules)


def _files(package: str) -> list[Path]:
    folder = SOURCE / package
    return sorted(folder.rglob("*.py")) if folder.is_dir() else [SOURCE / f"{package}.py"]


def _namespace(path: Path, tree: ast.Module) -> dict[str, object]:
    """The names a module's raises can use: its globals; for a `__main__` (importing it would run
    a command), what its top-level `contrast` imports bind."""
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    if parts[-1] != "__main__":
        return vars(importlib.import_module(name))
    namespace: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("contrast"):
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if value is None:
                    value = importlib.import_module(f"{node.module}.{alias.name}")
                namespace[alias.asname or alias.name] = value
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("contrast") and alias.asname:
                    namespace[alias.asname] = importlib.import_module(alias.name)
    return namespace


def _resolve(namespace: dict[str, object], expression: ast.expr) -> object:
    """What `Name` or `a.b.C` names in `namespace`; None for anything else (a variable)."""
    if isinstance(expression, ast.Name):
        return namespace.get(expression.id)
    if isinstance(expression, ast.Attribute):
        base = _resolve(namespace, expression.value)
        return None if base is None else getattr(base, expression.attr, None)
    return None


def _exceptions_of(value: object, depth: int = 0) -> list[type[BaseException]]:
    """The classes a raise makes: the class itself, or those a function it calls constructs in
    its `return X(...)` statements (`raise history_damaged(...)`, `raise self._refuse(...)`).
    A function that returns an error it was given (`raise _most_telling(failures)`) makes none:
    that error was made, and checked, where it was raised first."""
    if inspect.isclass(value) and issubclass(value, BaseException):
        return [value]
    function = inspect.unwrap(value) if callable(value) else None
    if not inspect.isfunction(function) or depth > 2:
        return []
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    made: list[type[BaseException]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
            called = _resolve(function.__globals__, node.value.func)
            made.extend(_exceptions_of(called, depth + 1))
    return made


def _raised_classes(path: Path) -> list[tuple[int, type[BaseException]]]:
    """(line, class) of each raise in the file whose class can be told from the code: a class,
    a module's attribute, a function or a method of the enclosing class with an exception as
    its return annotation. A re-raise of a variable (`raise error`) made nothing new."""
    tree = ast.parse(path.read_text(), str(path))
    namespace = _namespace(path, tree)
    found: list[tuple[int, type[BaseException]]] = []

    def visit(node: ast.AST, owner: object) -> None:
        if isinstance(node, ast.ClassDef):
            owner = namespace.get(node.name) if owner is None else getattr(owner, node.name, None)
        if isinstance(node, ast.Raise) and node.exc is not None:
            made = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            is_method = (
                isinstance(made, ast.Attribute)
                and isinstance(made.value, ast.Name)
                and made.value.id in ("self", "cls")
            )
            if is_method and isinstance(made, ast.Attribute):
                value = getattr(owner, made.attr, None) if owner is not None else None
            else:
                value = _resolve(namespace, made)
            found.extend((node.lineno, raised) for raised in _exceptions_of(value))
        for child in ast.iter_child_nodes(node):
            visit(child, owner)

    visit(tree, None)
    return found


def _foreign(package: str, raised: type[BaseException]) -> bool:
    """Another package's error, or the bare root: `contrast.errors` is its own package's."""
    module = raised.__module__
    return module.startswith("contrast.") and not f"{module}.".startswith(f"contrast.{package}.")


def test_the_raise_walk_finds_the_raises() -> None:
    """Guards the walk: resolving nothing would let every package pass."""
    everything = [
        (path, line, raised)
        for package in _packages()
        for path in _files(package)
        for line, raised in _raised_classes(path)
    ]
    contrast_raises = [r for r in everything if r[2].__module__.startswith("contrast.")]
    assert len(contrast_raises) > 500, len(contrast_raises)
    found = {(p.relative_to(SOURCE).as_posix(), line, r.__name__) for p, line, r in everything}
    for file, fragment, name in (
        ("coordinator/core.py", 'raise history_damaged("the history head', "StoredStateDamaged"),
        ("kata/unpack.py", "raise self._refuse(", "KataReleaseError"),
        ("generate/staging.py", "raise CannotWriteResources(", "CannotWriteResources"),
        ("boundedjson.py", "raise JsonInputError(", "JsonInputError"),
    ):
        lines = (SOURCE / file).read_text().splitlines()
        line = next(n for n, text in enumerate(lines, 1) if fragment in text)
        assert (file, line, name) in found, (file, line, fragment)


@pytest.mark.parametrize("package", _packages())
def test_a_package_raises_only_its_own_errors(package: str) -> None:
    """A package raises its own errors (or a builtin), not another package's nor the bare root.

    Issue 27: `ca/sealed.py` raised `history` errors, so the Coordinator could not tell a damaged
    history entry from a CA sealed by another seed; `attestation` raised the bare `ContrastError`
    for bad arguments; the CLI's commands raised the bare root for their options, and the
    Coordinator package's CannotListen for a port of their own (cli.errors has both now). Then
    every package: a refusal of another package's class (the manifest verifier's
    ReferenceMismatch, generate's WorkspaceError) is a class of the raiser's, under both where a
    caller must still catch it as the other (`manifest.errors.ManifestReferenceMismatch`).
    An error that only passes through a package is not raised by it and is not counted.
    """
    foreign = [
        f"{path.relative_to(SOURCE)}:{line}: {_describe(raised)}"
        for path in _files(package)
        for line, raised in _raised_classes(path)
        if _foreign(package, raised)
    ]
    assert not foreign, f"{package} raises other packages' errors or the bare root: {foreign}"
