"""Staged writes after a crash: each file holds its old or its new text (contrast.generate.staging).

The texts are written unsynced and synced with one `syncfs` before the first rename
(`contrast.syncfs`). Two things make that as safe as an `fsync` per file:
- the order, seen by an audit hook on the real calls: every temporary file is created before the
  `syncfs`, every rename comes after it, and each directory is opened for its `fsync` after the
  last rename into it;
- a writer killed with SIGKILL at any of those steps (before the sync, before the k-th rename,
  before the directory sync) leaves every file whole, old or new.
A power cut between the steps is what the order guarantees; no test here can cut the power.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from contrast import syncfs
from contrast.generate.staging import StagedWrites
from contrast.kuberesource import yamlio
from tests import fileevents

COUNT = 12
OLD = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings-{index}\ndata:\n  a: '1'\n"
NEW = OLD + "  b: '2'\n"


@pytest.fixture
def events() -> Iterator[list[tuple[str, str]]]:
    yield from fileevents.recording()


def _files(directory: Path) -> list[yamlio.ResourceFile]:
    directory.mkdir(exist_ok=True)
    files = []
    for index in range(COUNT):
        path = directory / f"config-{index}.yml"
        path.write_text(OLD.format(index=index))
        files.append(yamlio.load(path, plain=True))
    return files


def test_syncfs_reports_errors_on_this_kernel() -> None:
    # The fast path is the one tested and run here; a kernel before 5.8 syncs each file.
    assert syncfs.available(), f"syncfs without error reports on Linux {os.uname().release}"
    assert syncfs.kernel_version("5.7.19-generic") < syncfs.ERRORS_REPORTED_SINCE
    assert syncfs.kernel_version("6.8.0-45-generic") == (6, 8)
    assert syncfs.kernel_version("5.10-rc1") >= syncfs.ERRORS_REPORTED_SINCE
    assert syncfs.kernel_version("unknown") == (0, 0)


def test_one_sync_before_the_first_rename_directories_after_the_last(
    tmp_path: Path, events: list[tuple[str, str]]
) -> None:
    directories = [tmp_path / "a", tmp_path / "b"]
    files = [file for directory in directories for file in _files(directory)]
    for file in files:
        file.documents[0]["data"]["b"] = "2"
    with StagedWrites() as staged:
        for file in files:
            staged.stage(file, *file.dumped())
        assert staged.write(files) == [True] * len(files)
    assert [file.path.read_text() for file in files] == [
        NEW.format(index=index) for _ in directories for index in range(COUNT)
    ]
    kinds = [kind for kind, _ in events]
    assert kinds.count("syncfs") == 1  # both directories are on one file system
    sync = kinds.index("syncfs")
    temporaries = [i for i, (kind, path) in enumerate(events) if kind == "open" and ".tmp" in path]
    renames = [i for i, kind in enumerate(kinds) if kind == "rename"]
    assert len(temporaries) == len(renames) == len(files)
    assert max(temporaries) < sync < min(renames)
    for directory in directories:
        opened = [
            i for i, (kind, path) in enumerate(events) if (kind, path) == ("open", str(directory))
        ]
        staged_here = [i for i in temporaries if Path(events[i][1]).parent == directory]
        # Opened before its first staged write (the descriptor syncfs is given, which reports
        # the writeback errors after it was opened), and after the renames for its fsync.
        assert len(opened) == 2
        assert opened[0] < min(staged_here)
        assert opened[1] > max(renames)


def test_each_text_is_synced_where_syncfs_cannot_report_errors(
    tmp_path: Path, events: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(syncfs, "available", lambda: False)
    files = _files(tmp_path / "a")
    for file in files:
        file.documents[0]["data"]["b"] = "2"
    with StagedWrites() as staged:
        for file in files:
            staged.stage(file, *file.dumped())
        assert staged.write(files) == [True] * len(files)
    assert [file.path.read_text() for file in files] == [
        NEW.format(index=index) for index in range(COUNT)
    ]
    assert ("syncfs", "") not in events


# The writer of the kill tests: stages COUNT changed files in argv[1], then writes them; an audit
# hook kills it with SIGKILL just before the step named by argv[2]/argv[3]: "syncfs" 1, the k-th
# "rename", the "directory" sync (its open after the renames), or never ("none"). The sync is
# seen by its audit event, os.replace and os.open by theirs (`os.rename`, `open`).
WRITER = """
import os, signal, sys
from pathlib import Path
from contrast import syncfs
from contrast.generate.staging import StagedWrites
from contrast.kuberesource import yamlio

directory, step, nth = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
seen = {"syncfs": 0, "rename": 0, "directory": 0}
writing = False

def hook(event, arguments):
    if not writing:
        return
    if event == syncfs.AUDIT_EVENT:
        name = "syncfs"
    elif event == "os.rename":
        name = "rename"
    elif event == "open" and arguments[0] == str(directory) and seen["rename"]:
        name = "directory"
    else:
        return
    seen[name] += 1
    if name == step and seen[name] == nth:
        os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(hook)
files = [yamlio.load(path, plain=True) for path in sorted(directory.glob("config-*.yml"))]
for file in files:
    file.documents[0]["data"]["b"] = "2"
with StagedWrites() as staged:
    for file in files:
        staged.stage(file, *file.dumped())
    writing = True
    staged.write(files)
"""


@pytest.mark.parametrize(
    ("step", "nth"),
    [
        ("syncfs", 1),
        *[("rename", nth) for nth in (1, 2, COUNT // 2, COUNT)],
        ("directory", 1),
        ("none", 0),
    ],
)
def test_a_writer_killed_at_any_step_leaves_each_file_old_or_new(
    tmp_path: Path, step: str, nth: int
) -> None:
    directory = tmp_path / "resources"
    _files(directory)
    process = subprocess.run(
        [sys.executable, "-c", WRITER, str(directory), step, str(nth)],
        capture_output=True,
        text=True,
        check=False,
    )
    killed = step != "none"
    assert process.returncode == (-signal.SIGKILL if killed else 0), process.stderr
    texts = [(directory / f"config-{index}.yml").read_text() for index in range(COUNT)]
    new = [
        text == NEW.format(index=index) for index, text in enumerate(texts)
    ]  # fmt: skip
    for index, (text, is_new) in enumerate(zip(texts, new, strict=True)):
        assert is_new or text == OLD.format(index=index), f"config-{index}.yml: {text!r}"
    if step == "syncfs":
        assert not any(new)  # nothing renamed before the texts are on disk
    elif step in {"directory", "none"}:
        assert all(new)
    else:  # renames run in threads: only those that began before the nth
        assert sum(new) <= nth - 1
    leftovers = sorted(p.name for p in directory.iterdir() if not p.name.startswith("config-"))
    assert all(name.endswith(".tmp") for name in leftovers)
    assert len(leftovers) == (0 if not killed else COUNT - sum(new))
