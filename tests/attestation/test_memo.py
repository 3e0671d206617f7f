"""The identity memo the verifiers keep their checked chains in (issue 14): sound and bounded."""

from __future__ import annotations

import gc

import pytest

from contrast.attestation.memo import IdentityMemo


class Thing:
    """Equal to every other Thing: the memo must still tell them apart."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Thing)

    def __hash__(self) -> int:
        return 0


def test_the_same_objects_hit_and_equal_ones_miss() -> None:
    memo: IdentityMemo[str] = IdentityMemo(4)
    a, b, twin = Thing(), Thing(), Thing()
    memo.put("checked", a, b)
    assert memo.get(a, b) == "checked"
    assert memo.get(twin, b) is None
    assert memo.get(b, a) is None  # order is part of the key
    assert memo.get(a) is None
    assert memo.get(a, b, b) is None


def test_an_entry_holds_its_objects_so_their_ids_stay_theirs() -> None:
    memo: IdentityMemo[str] = IdentityMemo(4)
    memo.put("checked", Thing())
    gc.collect()
    newcomers = [Thing() for _ in range(1000)]  # would reuse a freed address if there were one
    assert all(memo.get(n) is None for n in newcomers)


def test_the_least_recently_used_entry_goes_first() -> None:
    memo: IdentityMemo[int] = IdentityMemo(2)
    a, b, c = Thing(), Thing(), Thing()
    memo.put(1, a)
    memo.put(2, b)
    assert memo.get(a) == 1  # a is now the most recently used
    memo.put(3, c)
    assert len(memo) == 2
    assert memo.get(b) is None
    assert memo.get(a) == 1
    assert memo.get(c) == 3


def test_a_memo_holds_something() -> None:
    with pytest.raises(ValueError, match="at least one"):
        IdentityMemo(0)
