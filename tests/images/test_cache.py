"""The layer cache file: format, tolerance of damage and of other versions, concurrent writers."""

from __future__ import annotations

import json
import logging
import multiprocessing
from pathlib import Path

import pytest

from contrast.images.cache import LayerCache
from contrast.images.layers import LayerFacts, LayerFile


def facts(number: int, passwd: str | None = "p", deleted: bool = False) -> LayerFacts:
    return LayerFacts(
        diff_id=f"sha256:{number:064x}",
        passwd=LayerFile(content=passwd, deleted=deleted),
        group=LayerFile(),
        size=number,
    )


def test_round_trip_keeps_absent_empty_and_deleted_apart(tmp_path: Path) -> None:
    path = tmp_path / "layers-cache.json"
    cache = LayerCache(path)
    written = [facts(1, None), facts(2, ""), facts(3, None, deleted=True), facts(4, "x", True)]
    for entry in written:
        cache.put(entry)
    cache.save()

    loaded = LayerCache(path)

    assert [loaded.get(entry.diff_id) for entry in written] == written
    document = json.loads(path.read_text())
    assert document[2] == {
        "diff_id": facts(3).diff_id,
        "passwd": None,
        "group": None,
        "deleted": ["passwd"],
        "size": 3,
    }


def test_unknown_fields_and_foreign_entries_survive(tmp_path: Path) -> None:
    path = tmp_path / "layers-cache.json"
    genpolicy_entry = {
        "diff_id": f"sha256:{9:064x}",
        "passwd": "",
        "group": "",
        "verity_hash": "ab",
    }
    newer = {"diff_id": f"sha256:{8:064x}", "passwd": "n", "group": None, "size": 8, "extra": 1}
    path.write_text(json.dumps([genpolicy_entry, newer, "garbage"]))

    cache = LayerCache(path)
    assert cache.get(genpolicy_entry["diff_id"]) is None  # '' is ambiguous there: read again
    assert cache.get(newer["diff_id"]) == facts(8, "n")
    cache.put(facts(1))
    cache.save()

    kept = {entry["diff_id"]: entry for entry in json.loads(path.read_text())}
    assert kept[genpolicy_entry["diff_id"]] == genpolicy_entry
    assert kept[newer["diff_id"]] == newer
    assert facts(1).diff_id in kept


@pytest.mark.parametrize("content", ["{not json", '{"an": "object"}', "\udcff"])
def test_corrupt_cache_warns_and_is_rebuilt(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "layers-cache.json"
    path.write_bytes(content.encode(errors="surrogateescape"))
    with caplog.at_level(logging.WARNING):
        cache = LayerCache(path)
    assert "rebuilt" in caplog.text
    cache.put(facts(5))
    cache.save()
    assert LayerCache(path).get(facts(5).diff_id) == facts(5)


def test_nothing_learned_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "layers-cache.json"
    cache = LayerCache(path)
    cache.save()
    assert not path.exists()
    cache.put(facts(1))
    cache.save()
    before = path.stat().st_mtime_ns, path.read_bytes()
    again = LayerCache(path)
    again.put(facts(1))
    again.save()
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before


def _writer(path: str, worker: int, rounds: int, start: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    for round_ in range(rounds):
        cache = LayerCache(Path(path))
        for item in range(3):
            cache.put(facts(worker * 1000 + round_ * 10 + item))
        cache.save()


def test_concurrent_processes_keep_every_entry(tmp_path: Path) -> None:
    path = tmp_path / "layers-cache.json"
    context = multiprocessing.get_context("spawn")
    workers, rounds = 4, 6
    start = context.Barrier(workers)
    processes = [
        context.Process(target=_writer, args=(str(path), worker, rounds, start))
        for worker in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0

    entries = json.loads(path.read_text())
    expected = {
        facts(worker * 1000 + round_ * 10 + item).diff_id
        for worker in range(workers)
        for round_ in range(rounds)
        for item in range(3)
    }
    assert {entry["diff_id"] for entry in entries} == expected
    assert len(entries) == len(expected)
    assert [p.name for p in tmp_path.iterdir()] == ["layers-cache.json"]  # no lock left
