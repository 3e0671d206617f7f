"""The runtime hash, derived where it is used: from the shipped description and the installer's
source as they are, with no recorded hash to regenerate and no pydantic at start."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from contrast import platforms
from contrast.runtimedescription import digest
from tests.fresh_python import printed_by

SOURCE = Path(platforms.__file__).parent
NAMES = (
    "from contrast import platforms; print(*(p.runtime_class_name for p in platforms.PLATFORMS))"
)


def test_naming_runtime_classes_imports_neither_pydantic_nor_the_installer() -> None:
    """What the description's dataclasses are for: `generate` names a runtime class on every run."""
    loaded = "print('pydantic' in sys.modules, 'contrast.nodeinstaller' in sys.modules)"
    assert printed_by(f"import sys; {NAMES}; {loaded}")[-2:] == ["False", "False"]


def test_the_installer_digest_covers_every_python_file_of_the_installer() -> None:
    expected = sorted(
        str(path.relative_to(SOURCE))
        for package in digest.INSTALLER_PACKAGES
        for path in (SOURCE / package).rglob("*.py")
        if "__pycache__" not in path.parts
    )
    assert sorted(name for name, _ in digest.installer_files()) == expected
    assert "nodeinstaller/install.py" in expected
    assert "runtimedescription/digest.py" in expected


def _names(root: Path) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", NAMES], capture_output=True, text=True, check=True,
        cwd=root, env={"PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    return result.stdout.split()


def test_a_change_to_the_installer_renames_every_runtime_with_no_step_to_remember(
    tmp_path: Path,
) -> None:
    """The rule that was: "after any change under nodeinstaller/, regenerate runtime-hashes.json".
    Now a copy of the package with one installer file changed names every runtime anew by
    itself, and a copy with no change names them as this tree does."""
    copy = tmp_path / "contrast"
    shutil.copytree(SOURCE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = _names(tmp_path)
    assert before == [platform.runtime_class_name for platform in platforms.PLATFORMS]
    install = copy / "nodeinstaller" / "install.py"
    install.write_text(install.read_text() + "\n# a comment is a change too\n")
    after = _names(tmp_path)
    assert len(after) == len(before) == len(platforms.PLATFORMS)
    for old, new in zip(before, after, strict=True):
        assert old != new
        assert platforms.from_runtime_class(old) is platforms.from_runtime_class(new)
