"""generate on all cores writes what it writes in one process, byte for byte (issue 14).

Policies and the ruamel round trips of changed documents run in forked workers
(`contrast.generate.parallel`); their results come back in input order. Twin workspaces (same
keys, same emulated TEE) generate the same workloads with `CONTRAST_PROCESSES=2` and `=1`, a first
run and a re-run after the rules changed, and every file must be the same.
"""

from __future__ import annotations

import gc
import os
import shutil
from pathlib import Path

import pytest

from contrast.generate import parallel
from tests.generate.conftest import GenerateWorkspace

WORKLOADS = 2 * parallel.MINIMUM_ITEMS


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _deployment(index: int) -> str:
    image = ("ghcr.io/example/frontend:1.4.2", "ghcr.io/example/ledger:2.0.0")[index % 2]
    return f"""# service {index}: comments and quotes stay as they were
apiVersion: apps/v1
kind: Deployment
metadata:
  name: service-{index}
spec:
  selector:
    matchLabels: {{app: service-{index}}}
  template:
    metadata:
      labels:
        app: service-{index}
    spec:
      runtimeClassName: contrast-cc
      containers:
        - name: service
          image: {image}
          args: ["--replica", "{index}"]  # flow style, double quotes
          env:
            - name: INDEX
              value: '{index}'
"""


def _add_workloads(workspace: GenerateWorkspace) -> None:
    workspace.resources.mkdir(parents=True, exist_ok=True)
    for index in range(WORKLOADS):
        (workspace.resources / f"service-{index}.yml").write_text(_deployment(index))


def test_map_in_processes_keeps_the_order_and_uses_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(parallel.ENVIRONMENT, "2")
    items = list(range(3 * parallel.MINIMUM_ITEMS))
    answers = parallel.map_in_processes(lambda item: (item * item, os.getpid()), items)
    assert [square for square, _ in answers] == [item * item for item in items]
    assert os.getpid() not in {pid for _, pid in answers}, "nothing ran in a worker"


def test_workers_leave_what_they_inherit_out_of_garbage_collection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Frozen in the parent before the fork (fewer pages copied, shorter collections), and
    unfrozen here afterwards, also when a worker failed."""
    monkeypatch.setenv(parallel.ENVIRONMENT, "2")
    items = list(range(3 * parallel.MINIMUM_ITEMS))
    frozen = parallel.map_in_processes(lambda _: (gc.get_freeze_count(), os.getpid()), items)
    assert all(count > 0 for count, pid in frozen if pid != os.getpid())
    assert gc.get_freeze_count() == 0

    def step(item: int) -> int:
        if item == 7:
            raise ValueError("a failing item")
        return item

    with pytest.raises(ValueError, match="a failing item"):
        parallel.map_in_processes(step, items)
    assert gc.get_freeze_count() == 0


def test_map_in_processes_one_process_when_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENVIRONMENT, "1")
    items = list(range(3 * parallel.MINIMUM_ITEMS))
    assert set(parallel.map_in_processes(lambda _: os.getpid(), items)) == {os.getpid()}


def test_an_error_in_a_worker_is_raised_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENVIRONMENT, "2")

    def step(item: int) -> int:
        if item == 7:
            raise ValueError(f"item {item} in process {os.getpid()}")
        return item

    with pytest.raises(ValueError, match=f"item 7 in process {os.getpid()}$"):
        parallel.map_in_processes(step, list(range(3 * parallel.MINIMUM_ITEMS)))


def test_a_worker_that_dies_leaves_the_work_to_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(parallel.ENVIRONMENT, "2")
    parent = os.getpid()

    def step(item: int) -> int:
        if os.getpid() != parent:
            os._exit(1)  # as if killed: the pool breaks
        return item

    items = list(range(3 * parallel.MINIMUM_ITEMS))
    assert parallel.map_in_processes(step, items) == items


@pytest.mark.parametrize("processes", ["1", "2"])
def test_each_result_is_handed_over_as_it_arrives(
    monkeypatch: pytest.MonkeyPatch, processes: str
) -> None:
    """`on_result` sees every result once, here, before the list is returned; one a dead
    worker never sent is computed here and handed over too."""
    monkeypatch.setenv(parallel.ENVIRONMENT, processes)
    parent = os.getpid()
    items = list(range(3 * parallel.MINIMUM_ITEMS))

    def step(item: int) -> int:
        if item == len(items) - 1 and os.getpid() != parent:
            os._exit(1)  # the last item breaks the pool: it and the unsent ones are redone
        return item * 2

    seen: dict[int, int] = {}

    def take(index: int, result: int) -> None:
        assert os.getpid() == parent
        assert index not in seen
        seen[index] = result

    assert parallel.map_in_processes(step, items, on_result=take) == [i * 2 for i in items]
    assert seen == {index: index * 2 for index in items}


def test_generate_on_all_cores_writes_what_one_process_writes(
    workspace: GenerateWorkspace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _add_workloads(workspace)
    workspace.add_coordinator("emulated-snp")
    arguments = ("--reference-values", "emulated-snp", str(workspace.resources))
    assert workspace.generate(*arguments) == 0  # keys and the emulated TEE, shared by the twins
    twin = GenerateWorkspace(
        workspace.root.parent / "twin", workspace.layout, workspace.reference_values
    )
    shutil.copytree(workspace.root, twin.root)
    for target in (workspace, twin):  # back to the user's input
        shutil.rmtree(target.resources)
        _add_workloads(target)
        target.add_coordinator("emulated-snp")
        (target.root / "manifest.json").unlink()
    twin_arguments = ("--reference-values", "emulated-snp", str(twin.resources))
    capsys.readouterr()

    for step in ("first run", "rules changed"):
        if step == "rules changed":  # every annotation changes: the round trips read them
            for target in (workspace, twin):
                rules = target.root / "rules.rego"
                rules.write_text(rules.read_text() + "\n# changed\n")
        monkeypatch.setenv(parallel.ENVIRONMENT, "2")
        assert workspace.generate(*arguments) == 0
        warned = _warnings(capsys.readouterr().err)
        monkeypatch.setenv(parallel.ENVIRONMENT, "1")
        assert twin.generate(*twin_arguments) == 0
        assert _files(workspace.root) == _files(twin.root), step
        # The checks ran in the workers: the same warnings, in the same order.
        twin_warned = _warnings(
            capsys.readouterr().err.replace(str(twin.root), str(workspace.root))
        )
        assert warned == twin_warned, step
        assert len(warned) >= WORKLOADS  # an unpinned image each


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def test_a_schema_error_among_many_is_the_one_a_single_process_reports(
    workspace: GenerateWorkspace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _add_workloads(workspace)
    workspace.add_coordinator("emulated-snp")
    for index in (20, 25):  # two wrong ones: the first in the order of the files is reported
        path = workspace.resources / f"service-{index}.yml"
        wrong = "- name: service\n          tty: 'no'\n"  # a string where a boolean belongs
        path.write_text(path.read_text().replace("- name: service\n", wrong))
    before = _files(workspace.root)
    errors = []
    for processes in ("2", "1"):
        monkeypatch.setenv(parallel.ENVIRONMENT, processes)
        code = workspace.generate("--reference-values", "emulated-snp", str(workspace.resources))
        assert code != 0
        # The error line (a note about source builds comes once per process).
        lines = capsys.readouterr().err.splitlines()
        errors.append([line for line in lines if line.startswith("contrast:")])
        assert _files(workspace.root) == before
    assert errors[0] == errors[1]
    (error,) = errors[0]
    assert "service-20.yml" in error
    assert "tty" in error
