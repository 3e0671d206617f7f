"""Copies of the installer's Python that no process uses are removed; every other one stays.

The copies are real (`install_bundle` from this interpreter with this checkout's `src`, plus a salt
file so that each "image" has its own digest; ~120 MB and ~1 s each), the processes that keep a
copy are real processes on this machine, and `/proc` is this machine's, as the DaemonSet's
installer (hostPID) sees the node's. One scene of two handlers is built and pruned once for the
tests that only look at its outcome.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

from contrast.nodeinstaller.bundleprune import PruneReport, prune_bundles
from contrast.nodeinstaller.hostroot import Resolver
from contrast.nodeinstaller.install import InstallRequest, install_runtime
from contrast.nodeinstaller.pythonbundle import install_bundle, partial_name
from contrast.nodeinstaller.targetconfig import TargetConfig
from contrast.platforms import by_name
from contrast.runtimedescription.digest import handler_of
from contrast.runtimedescription.shipped import load_runtime

SRC = Path(__file__).resolve().parents[2] / "src"
TIMEOUT = 30


def salted_sites(directory: Path, salt: str) -> list[Path]:
    """Site directories whose bundle differs from every other salt's (another image)."""
    site = directory / f"site-{salt}"
    site.mkdir(parents=True, exist_ok=True)
    (site / "image_salt.py").write_text(f"SALT = {salt!r}\n")
    return [SRC, site]


def make_copy(install_dir: Path, salt: str) -> Path:
    """A complete copy in `install_dir`, as an installer of image `salt` leaves it; its home."""
    with Resolver(Path("/")) as host:
        wrapper, copied = install_bundle(
            host, PurePosixPath(install_dir), sites=salted_sites(install_dir.parent, salt)
        )
    assert copied
    return Path(wrapper).parents[1]


def prune(install_dir: Path, current: Path | None) -> PruneReport:
    """What the installer does once its launcher names `current`'s Python."""
    python = None if current is None else PurePosixPath(current / "bin/python")
    with Resolver(Path("/")) as host:
        return prune_bundles(host, PurePosixPath(install_dir), python)


def files_of(directory: Path) -> dict[str, int]:
    """Every entry below `directory` with its size (links as their target's length)."""
    return {
        str(path.relative_to(directory)): path.lstat().st_size
        for path in sorted(directory.rglob("*"))
    }


def interrupted_install(install_dir: Path, salt: str) -> Path:
    """The staging directory an install killed (SIGKILL: no cleanup) in mid-copy leaves."""
    sites = salted_sites(install_dir.parent, salt)
    code = (
        "import sys; from pathlib import Path, PurePosixPath;"
        " from contrast.nodeinstaller.hostroot import Resolver;"
        " from contrast.nodeinstaller.pythonbundle import install_bundle;"
        " install_bundle(Resolver(Path('/')), PurePosixPath(sys.argv[1]),"
        " sites=[Path(p) for p in sys.argv[2:]])"
    )
    before = set(install_dir.iterdir()) if install_dir.exists() else set()
    process = subprocess.Popen([sys.executable, "-c", code, str(install_dir), *map(str, sites)])
    deadline = time.monotonic() + TIMEOUT
    staging: list[Path] = []
    while time.monotonic() < deadline and process.poll() is None:
        if install_dir.exists():
            staging = [p for p in install_dir.iterdir() if p not in before and "staging" in p.name]
        if staging and (staging[0] / "lib").is_dir():
            break
        time.sleep(0.005)
    process.kill()
    process.wait()
    assert len(staging) == 1, "the install was not caught in mid-copy"
    assert staging[0].is_dir(), "the install ended before it was killed"
    completed = [p for p in install_dir.iterdir() if p.name.startswith("python-")]
    assert not set(completed) - before
    return staging[0]


@dataclass(frozen=True)
class Scene:
    """Two handlers' directories before one prune of handler A, and what that prune did."""

    handler_a: Path
    handler_b: Path
    old: Path
    current: Path
    current_files: dict[str, int]
    staging: Path
    aside: Path
    other_handlers_copy: Path
    other_handlers_files: dict[str, int]
    others: dict[str, int]  # entries of A that are no bundle directory
    report: PruneReport


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Scene:
    root = tmp_path_factory.mktemp("node") / "opt/edgeless"
    handler_a, handler_b = root / "handler-a", root / "handler-b"
    old = make_copy(handler_a, "old")
    current = make_copy(handler_a, "current")
    staging = interrupted_install(handler_a, "partial")
    # A removal cut short: the old copy's twin renamed aside, half deleted.
    aside = handler_a / partial_name(old.name, "removing")
    shutil.copytree(old / "site-packages/contrast/nodeinstaller", aside / "site-packages")
    # The same image's copy in another handler: the same name, another directory.
    handler_b.mkdir()
    other = handler_b / old.name
    shutil.copytree(old, other, symlinks=True)
    # Names a prune must not take for bundles.
    (handler_a / "bin").mkdir()
    (handler_a / "bin/contrast-emulated-runc").write_text("#!/bin/sh\n")
    (handler_a / "python-notes").mkdir()
    (handler_a / "python-0123456789ABCDEF").mkdir()
    (handler_a / ".restart-pending").write_text("")
    elsewhere = root / "elsewhere"
    (elsewhere / "bin").mkdir(parents=True)
    (handler_a / "python-0123456789abcdef").symlink_to(elsewhere)
    bundles = {old.name, current.name, staging.name, aside.name}
    others = {k: v for k, v in files_of(handler_a).items() if k.split("/")[0] not in bundles}
    current_files, other_files = files_of(current), files_of(other)
    report = prune(handler_a, current)
    return Scene(
        handler_a,
        handler_b,
        old,
        current,
        current_files,
        staging,
        aside,
        other,
        other_files,
        others,
        report,
    )


def test_an_old_unused_copy_is_removed(scene: Scene) -> None:
    assert not scene.old.exists()
    assert str(scene.old) in scene.report.removed
    assert scene.report.in_use == ()
    # Nothing of it is left under another name either.
    assert not [p for p in scene.handler_a.iterdir() if scene.old.name in p.name]


def test_the_current_copy_is_kept_whole_and_runs(scene: Scene) -> None:
    assert files_of(scene.current) == scene.current_files
    assert str(scene.current) not in scene.report.removed
    result = subprocess.run(
        [str(scene.current / "bin/python"), "-c", "import image_salt; print(image_salt.SALT)"],
        env={},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "current\n"), result.stderr


def test_another_handlers_copy_is_kept(scene: Scene) -> None:
    assert files_of(scene.other_handlers_copy) == scene.other_handlers_files
    assert [p.name for p in scene.handler_b.iterdir()] == [scene.old.name]


def test_partial_copies_are_removed(scene: Scene) -> None:
    """The staging directory of a killed install, the aside copy of a cut-short removal."""
    assert not scene.staging.exists()
    assert not scene.aside.exists()
    assert {str(scene.staging), str(scene.aside)} <= set(scene.report.removed)


def test_nothing_but_bundle_directories_is_touched(scene: Scene) -> None:
    left = files_of(scene.handler_a)
    assert {k: v for k, v in left.items() if not k.startswith(scene.current.name)} == scene.others
    assert (scene.handler_a / "python-0123456789abcdef").is_symlink()
    assert (scene.handler_a / "python-0123456789abcdef/bin").is_dir()  # its target, untouched
    assert len(scene.report.removed) == 3


READY = "import sys; print('ready', flush=True); import time; time.sleep(600)"
MAPPER = (
    "import mmap, os, sys, time; f = open(os.environ['MAPPED'], 'rb');"
    " m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); f.close();"
    " print('ready', flush=True); time.sleep(600)"
)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def start(
    argv: list[str],
    *,
    cwd: Path | None = None,
    stdin: Path | None = None,
    mapped: Path | None = None,
) -> subprocess.Popen[str]:
    """A process in its own session that prints `ready` once it runs as it will go on running."""
    env = {"PATH": os.environ["PATH"]} | ({} if mapped is None else {"MAPPED": str(mapped)})
    with open(stdin or os.devnull, "rb") as input_file:  # the parent's copy closed at once
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=input_file,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            start_new_session=True,
        )
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n", f"{argv} did not start"
    return process


def test_a_copy_a_process_uses_is_kept_and_removed_once_unused(
    tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """Each way a process can use a copy alone keeps it: the TEE server's way (the copy's Python:
    executable, mappings, command line all in it), a command line naming it only, a working
    directory, an open file, a mapping only. The copy is reached through a link (/opt -> /var/opt
    on some nodes), so the kernel names it by another path than the launcher does."""
    (tmp_path / "real").mkdir()
    (tmp_path / "opt").symlink_to(tmp_path / "real")
    install_dir = tmp_path / "opt/handler"
    home = make_copy(install_dir, "old")
    real = tmp_path / "real/handler" / home.name
    files = files_of(real)
    ways = {
        "the copy's python": lambda: start([str(home / "bin/python"), "-c", READY]),
        "command line": lambda: start(
            ["sh", "-c", "echo ready; sleep 600", str(home / "bin/python")]
        ),
        "working directory": lambda: start(
            ["sh", "-c", "echo ready; exec sleep 600"], cwd=home / "lib"
        ),
        "open file": lambda: start(
            ["sh", "-c", "echo ready; exec sleep 600"], stdin=home / "site-packages/image_salt.py"
        ),
        "mapping": lambda: start([sys.executable, "-c", MAPPER], mapped=real / "so" / "libc.so.6"),
    }
    for way, run in ways.items():
        process = run()
        started.append(process)
        changed = real.stat().st_ctime_ns
        report = prune(install_dir, None)
        assert (report.removed, report.in_use) == ((), ((str(home), process.pid),)), way
        assert process.pid not in report.uninspected
        assert files_of(real) == files, way
        assert real.stat().st_ctime_ns == changed, f"{way}: renamed (aside and back?)"
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    report = prune(install_dir, None)
    assert (report.removed, report.in_use) == ((str(home),), ())
    assert not real.exists()
    assert list((tmp_path / "real/handler").iterdir()) == []


def test_the_installer_prunes_after_writing_its_launcher(tmp_path: Path) -> None:
    """install_runtime of the emulated runtime, its Python named by `emulated-python`: an
    earlier installer's copy is removed, the copy that Python lies in is kept."""
    host = tmp_path / "host"
    (host / "etc/containerd").mkdir(parents=True)
    handler = handler_of(load_runtime("emulated-snp"))
    install_dir = host / "opt/edgeless" / handler
    for name in ("python-00000000000000aa", "python-00000000000000bb"):
        (install_dir / name / "bin").mkdir(parents=True)
        (install_dir / name / "bin/python").write_text("#!/bin/sh\n")
    (host / "opt/edgeless/another-handler/python-00000000000000aa").mkdir(parents=True)
    python = f"/opt/edgeless/{handler}/python-00000000000000bb/bin/python"
    target = TargetConfig.model_validate({"emulated-python": python})
    install_runtime(
        InstallRequest(host, by_name("emulated-snp"), target, tmp_path / "none", restart=False)
    )
    assert sorted(p.name for p in install_dir.glob("python-*")) == ["python-00000000000000bb"]
    assert (install_dir / "python-00000000000000bb/bin/python").is_file()
    assert (host / "opt/edgeless/another-handler/python-00000000000000aa").is_dir()
    assert python in (install_dir / "bin/contrast-emulated-runc").read_text()
