"""Owner keys: made in memory by `prepare_owner_keys`, written only by `write_new`."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from contrast.client.workspace import generate_workload_owner_key
from contrast.generate.errors import OwnerKeyRefused
from contrast.generate.keys import prepare_owner_keys


def test_prepared_keys_are_written_only_when_asked(tmp_path: Path) -> None:
    workload, seedshare = tmp_path / "workload-owner.pem", tmp_path / "seedshare-owner.pem"
    keys = prepare_owner_keys([workload], [seedshare], create_missing=True, disable_updates=False)
    assert list(tmp_path.iterdir()) == []
    assert keys.created == (workload, seedshare)
    assert "PRIVATE KEY" not in repr(keys)  # a key in memory never reaches a log
    assert keys.write_new() == (workload, seedshare)
    assert sorted(tmp_path.iterdir()) == [seedshare, workload]
    for path in (workload, seedshare):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = prepare_owner_keys([workload], [seedshare], create_missing=True, disable_updates=False)
    assert again.created == ()
    assert again.workload_owner_digests == keys.workload_owner_digests
    assert again.seedshare_owner_public_keys == keys.seedshare_owner_public_keys


def test_a_key_that_appeared_meanwhile_is_not_replaced(tmp_path: Path) -> None:
    workload = tmp_path / "workload-owner.pem"
    keys = prepare_owner_keys([workload], [], create_missing=True, disable_updates=False)
    theirs = generate_workload_owner_key()
    workload.write_bytes(theirs)
    with pytest.raises(OwnerKeyRefused, match="appeared while generate ran; it was not replaced"):
        keys.write_new()
    assert workload.read_bytes() == theirs
    assert list(tmp_path.iterdir()) == [workload]  # no temporary file left


def test_one_path_for_both_kinds_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    both = tmp_path / "owner.pem"
    with pytest.raises(OwnerKeyRefused, match="is not an RSA key"):
        prepare_owner_keys([both], [both], create_missing=True, disable_updates=False)
    assert list(tmp_path.iterdir()) == []
