"""The installer's own Python, copied for the emulated runtime, runs on nothing of the host's.

The bundle is made from this test's interpreter for real (its stdlib and this checkout's `src` as
the site directory; the venv's site-packages would add 465 MB and prove nothing more), at a real
path, and run with an empty environment: the interpreter, every shared library it maps and its
children must come from the bundle, which is how the node-installer image's Python runs on a node
whose glibc and Python it never saw.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from contrast import syncfs
from contrast.nodeinstaller.hostroot import Resolver
from contrast.nodeinstaller.pythonbundle import install_bundle
from tests import fileevents

SRC = Path(__file__).resolve().parents[2] / "src"
PROBE = """
import json, ssl, subprocess, sys, uuid
import contrast.errors
maps = {line.split()[5] for line in open("/proc/self/maps") if len(line.split()) > 5}
child = subprocess.run([sys.executable, "-c", "import sys; print(sys.prefix)"],
                       capture_output=True, text=True, check=True).stdout.strip()
print(json.dumps({"executable": sys.executable, "prefix": sys.prefix, "child": child,
                  "contrast": contrast.errors.__file__,
                  "libraries": sorted(p for p in maps if ".so" in p)}))
"""


def test_the_bundle_runs_its_own_loader_libraries_and_stdlib(tmp_path: Path) -> None:
    install_dir = PurePosixPath(tmp_path / "opt/edgeless/handler")
    with Resolver(Path("/")) as host:
        wrapper, copied = install_bundle(host, install_dir, sites=[SRC])
        again = install_bundle(host, install_dir, sites=[SRC])
    assert copied
    assert again == (wrapper, False)  # complete already: nothing copied
    home = Path(wrapper).parents[1]
    assert home.parent == Path(install_dir)
    assert home.name.startswith("python-")
    assert not [p for p in Path(install_dir).iterdir() if "staging" in p.name]

    result = subprocess.run(
        [str(wrapper), "-c", PROBE], env={}, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["executable"] == str(wrapper)  # so the TEE server is started through it again
    assert seen["prefix"] == str(home)
    assert seen["child"] == str(home)
    assert seen["contrast"].startswith(f"{home}/site-packages/contrast/")
    libraries = seen["libraries"]
    assert any(p.startswith(f"{home}/so/libc.so") for p in libraries), libraries
    assert any("libssl" in p for p in libraries), libraries
    outside = [p for p in libraries if not p.startswith(f"{home}/")]
    assert outside == [], f"libraries mapped from outside the bundle: {outside}"


@pytest.fixture
def events() -> Iterator[list[tuple[str, str]]]:
    yield from fileevents.recording(fileevents.writes)


@pytest.mark.parametrize("with_syncfs", [True, False], ids=["syncfs", "fsync-each"])
def test_the_copy_is_on_disk_before_its_name_says_complete(
    tmp_path: Path,
    events: list[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    with_syncfs: bool,
) -> None:
    """A crash after the rename must not find a complete-looking copy with files the disk never
    got: one syncfs of the staged tree's file system (or, where syncfs reports no errors, an
    fsync of every file and directory) comes after its last write and before the rename."""
    assert syncfs.available(), "this kernel's syncfs reports no writeback errors"
    if not with_syncfs:
        monkeypatch.setattr(syncfs, "available", lambda: False)
        fsync = os.fsync

        def recording_fsync(descriptor: int) -> None:
            events.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
            fsync(descriptor)

        monkeypatch.setattr(os, "fsync", recording_fsync)
    install_dir = PurePosixPath(tmp_path / "handler")
    with Resolver(Path("/")) as host:
        wrapper, copied = install_bundle(host, install_dir, sites=[SRC])
    assert copied
    home = Path(wrapper).parents[1]
    renames = [i for i, (kind, target) in enumerate(events) if kind == "rename"]
    assert [events[i][1] for i in renames] == [home.name]
    writes = [i for i, (kind, _) in enumerate(events) if kind == "write"]
    assert len(writes) > 1000
    if with_syncfs:
        syncs = [i for i, (kind, _) in enumerate(events) if kind == "syncfs"]
        assert len(syncs) == 1
        assert writes[-1] < syncs[0] < renames[0]
    else:
        staged = f"{install_dir}/.{home.name}.staging-"
        syncs = [i for i, (kind, path) in enumerate(events) if path.startswith(staged)]
        assert {events[i][0] for i in syncs} == {"fsync"}
        assert writes[-1] < syncs[0]
        assert syncs[-1] < renames[0]
        name = events[syncs[0]][1][len(f"{install_dir}/") :].split("/")[0]
        synced = {events[i][1].replace(name, home.name, 1) for i in syncs}
        assert synced == {str(p) for p in home.rglob("*")} | {str(home)}
