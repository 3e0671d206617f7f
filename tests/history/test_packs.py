"""Entries beyond one object: chunked manifests and packed policy documents, on every backend.

A manifest over `MAXIMUM_ENTRY_SIZE` is stored as chunks under an index, and read back only if
the joined bytes hash to its name; a manifest's policy documents are packed (as deltas against
the pack's first document, deflated), found through a pointer, and each re-hashed against the
hash asked for. Stores written before packs (one entry per document) and packs written before
deltas (length-prefixed documents) are still read.
"""

from __future__ import annotations

import hashlib
import os
import random
import zlib

import pytest

from contrast.history.errors import DamagedEntry, EntryTooLarge, HashMismatch
from contrast.history.history import (
    CHUNKED_MAGIC,
    INDEX_MAGIC,
    MAXIMUM_CHUNKED_SIZE,
    MAXIMUM_ENTRY_SIZE,
    MAXIMUM_INFLATED,
    PACK_MAGIC,
    History,
    _common_prefix,
    _common_suffix,
    digest,
    digests,
)
from contrast.history.store import MemoryStore, Store
from tests.kube.backends import StoreFactory, new_store

__all__ = ["new_store"]

ONE = "policysets/" + "01" * 32  # the pointer of the manifest b"\x01" * 32


def documents(count: int, size: int = 300) -> dict[bytes, bytes]:
    texts = [b"%d:" % index + os.urandom(size) for index in range(count)]
    return {digest(text): text for text in texts}


def entries(store: Store, kind: str) -> list[bytes]:
    return [store.get(f"{kind}/{name}") or b"" for name in store.names(kind)]


def test_a_manifest_over_one_entry_is_chunked_and_read_back(new_store: StoreFactory) -> None:
    store = new_store()
    history = History(store)
    manifest = os.urandom(2 * MAXIMUM_ENTRY_SIZE + 5)
    name = history.put_manifest(manifest)
    assert name == digest(manifest)
    assert sorted(map(len, entries(store, "chunks"))) == [5, MAXIMUM_ENTRY_SIZE, MAXIMUM_ENTRY_SIZE]
    assert History(new_store()).get_manifest(name) == manifest
    small = b"{}"
    assert history.get_manifest(history.put_manifest(small)) == small
    assert store.get(f"manifests/{digest(small).hex()}") == small  # as the original's layout


def test_an_altered_chunk_or_index_is_refused() -> None:
    store = MemoryStore()
    history = History(store)
    manifest = os.urandom(MAXIMUM_ENTRY_SIZE + 100)
    name = history.put_manifest(manifest)
    index_key = f"manifests/{name.hex()}"
    index = store.entries[index_key]
    # Two chunks swapped: each hashes to its own name, the whole does not.
    first, second = index[len(CHUNKED_MAGIC) :][:32], index[len(CHUNKED_MAGIC) :][32:]
    store.entries[index_key] = CHUNKED_MAGIC + second + first
    with pytest.raises(HashMismatch, match="chunks of"):
        history.get_manifest(name)
    store.entries[index_key] = CHUNKED_MAGIC + first  # one chunk left out
    with pytest.raises(HashMismatch, match="chunks of"):
        history.get_manifest(name)
    store.entries[index_key] = CHUNKED_MAGIC + first + second[:31]
    with pytest.raises(HashMismatch, match="tampered"):
        history.get_manifest(name)
    store.entries[index_key] = CHUNKED_MAGIC + first * (MAXIMUM_CHUNKED_SIZE // 2**20 + 1)
    with pytest.raises(HashMismatch, match="tampered"):  # bounded before any chunk is read
        history.get_manifest(name)
    store.entries[index_key] = index
    chunk = f"chunks/{first.hex()}"
    store.entries[chunk] = store.entries[chunk][:-1] + b"x"
    with pytest.raises(HashMismatch, match=chunk):
        history.get_manifest(name)
    del store.entries[chunk]
    with pytest.raises(DamagedEntry, match=f"no entry {chunk}"):
        history.get_manifest(name)


def test_a_manifest_beyond_the_chunked_bound_is_refused_before_writing() -> None:
    store = MemoryStore()
    with pytest.raises(EntryTooLarge, match="at most"):
        History(store).put_manifest(bytes(MAXIMUM_CHUNKED_SIZE + 1))
    assert store.entries == {}


def test_policies_are_packed_and_an_update_keeps_the_packs_it_mostly_uses(
    new_store: StoreFactory,
) -> None:
    store = new_store()
    history = History(store)
    first = documents(10_000)
    history.put_policies(b"\x01" * 32, first)
    packs = entries(store, "packs")
    assert len(packs) == 3
    assert max(map(len, packs)) <= MAXIMUM_ENTRY_SIZE
    reader = History(new_store())
    assert reader.get_policies(b"\x01" * 32, first) == first
    some = list(first)[::7]
    assert reader.get_policies(b"\x01" * 32, some) == {h: first[h] for h in some}

    # One document added, one removed: every pack is still mostly used, one new pack of one.
    updated = dict(list(first.items())[1:]) | documents(1)
    history.put_policies(b"\x02" * 32, updated, follows=b"\x01" * 32)
    assert len(entries(store, "packs")) == 4
    assert reader.get_policies(b"\x02" * 32, updated) == updated
    # Most documents replaced: the packs are written anew, not kept for the few still used.
    replaced = dict(list(first.items())[:100]) | documents(9_000)
    history.put_policies(b"\x03" * 32, replaced, follows=b"\x02" * 32)
    assert reader.get_policies(b"\x03" * 32, replaced) == replaced
    assert reader.get_policies(b"\x03" * 32, []) == {}


def test_a_document_the_packs_lack_or_that_was_altered_is_refused() -> None:
    store = MemoryStore()
    history = History(store)
    docs = documents(3)
    history.put_policies(b"\x01" * 32, docs)
    other = documents(1)
    with pytest.raises(DamagedEntry, match="no policy"):
        history.get_policies(b"\x01" * 32, [*docs, *other])
    (pack_key,) = [key for key in store.entries if key.startswith("packs/")]
    pack = store.entries[pack_key]
    store.entries[pack_key] = pack[:-1] + bytes([pack[-1] ^ 1])
    with pytest.raises(HashMismatch, match=pack_key):
        history.get_policies(b"\x01" * 32, docs)
    # A pack rewritten consistently (its name its new hash) with one document altered: the
    # pointer is replaced by an attacker with an index naming it; the document's hash differs.
    altered = dict(docs)
    first = next(iter(altered))
    altered[first] = altered[first] + b"!"
    store.entries[pack_key] = pack
    history.put_policies(b"\x09" * 32, altered)
    pointer = store.entries["policysets/" + "09" * 32]
    store.entries[ONE] = pointer
    with pytest.raises(DamagedEntry, match="no policy"):
        history.get_policies(b"\x01" * 32, docs)


@pytest.mark.parametrize("pointer", [b"", b"\x00" * 31, b"\x00" * 33])
def test_a_pointer_that_is_no_hash_is_damage(pointer: bytes) -> None:
    store = MemoryStore()
    history = History(store)
    history.put_policies(b"\x01" * 32, documents(2))
    store.entries[ONE] = pointer
    with pytest.raises(DamagedEntry, match="not a hash"):
        history.get_policies(b"\x01" * 32, [])


@pytest.mark.parametrize("cut", [1, 10, 40])
def test_a_truncated_index_or_pack_is_damage(cut: int) -> None:
    store = MemoryStore()
    history = History(store)
    docs = documents(2)
    history.put_policies(b"\x01" * 32, docs)
    # Rewritten under their new hashes, so that only the framing is wrong.
    (pack_key,) = [key for key in store.entries if key.startswith("packs/")]
    short_pack = store.entries[pack_key][:-cut]
    store.entries[f"packs/{digest(short_pack).hex()}"] = short_pack
    (index_key,) = [key for key in store.entries if key.startswith("policyindexes/")]
    index = store.entries[index_key].replace(bytes.fromhex(pack_key[6:]), digest(short_pack))
    store.entries[f"policyindexes/{digest(index).hex()}"] = index
    store.entries[ONE] = digest(index)
    with pytest.raises(DamagedEntry, match=r"truncated|no policy"):
        history.get_policies(b"\x01" * 32, docs)
    short_index = index[:-cut]
    store.entries[f"policyindexes/{digest(short_index).hex()}"] = short_index
    store.entries[ONE] = digest(short_index)
    with pytest.raises(DamagedEntry, match="truncated"):
        history.get_policies(b"\x01" * 32, docs)


def test_documents_stored_one_by_one_before_packs_are_still_read() -> None:
    store = MemoryStore()
    history = History(store)
    docs = documents(3)
    for document in docs.values():
        history.put_policy(document)
    assert history.get_policies(b"\x01" * 32, docs) == docs
    # And an update after such a manifest packs everything it lists.
    history.put_policies(b"\x02" * 32, docs, follows=b"\x01" * 32)
    assert history.get_policies(b"\x02" * 32, docs) == docs
    assert len([key for key in store.entries if key.startswith("packs/")]) == 1


def put_policies_before_deltas(
    store: Store, manifest_hash: bytes, docs: dict[bytes, bytes]
) -> None:
    """What `put_policies` wrote before delta packs (commit d3015d1 and earlier): one pack of
    length-prefixed documents, its index and the pointer, as that code encoded them."""
    pack = b"".join(len(document).to_bytes(4, "big") + document for document in docs.values())
    index = INDEX_MAGIC + digest(pack) + len(docs).to_bytes(4, "big") + b"".join(docs)
    store.put(f"packs/{digest(pack).hex()}", pack)
    store.put(f"policyindexes/{digest(index).hex()}", index)
    store.put(f"policysets/{manifest_hash.hex()}", digest(index))


def test_packs_written_before_deltas_are_still_read_and_kept_by_an_update() -> None:
    store = MemoryStore()
    history = History(store)
    old = documents(20)
    put_policies_before_deltas(store, b"\x01" * 32, old)
    assert history.get_policies(b"\x01" * 32, old) == old
    # An update that keeps most of them keeps the old pack and adds a delta pack of the rest.
    updated = old | similar(5)
    history.put_policies(b"\x02" * 32, updated, follows=b"\x01" * 32)
    packs = entries(store, "packs")
    assert len(packs) == 2
    assert sum(pack.startswith(PACK_MAGIC) for pack in packs) == 1
    assert History(store).get_policies(b"\x02" * 32, updated) == updated


def similar(count: int, shared: int = 50_000) -> dict[bytes, bytes]:
    """Documents as generated policies are: the same long text around each one's own data."""
    rules = os.urandom(shared // 2).hex().encode()
    texts = [rules[:-99] + b"%d" % index + os.urandom(200).hex().encode() + rules[-99:]
             for index in range(count)]  # fmt: skip
    return {digest(text): text for text in texts}


def test_similar_documents_are_stored_as_deltas_and_read_back_whole() -> None:
    store = MemoryStore()
    history = History(store)
    docs = similar(400) | documents(3) | {digest(b""): b""}  # and some unlike the others
    history.put_policies(b"\x01" * 32, docs)
    (pack,) = entries(store, "packs")
    assert pack.startswith(PACK_MAGIC)
    assert len(pack) < sum(map(len, docs.values())) / 50
    assert History(store).get_policies(b"\x01" * 32, docs) == docs


def rewritten_pack(store: MemoryStore, body: bytes, *, raw: bytes | None = None) -> None:
    """Replace the one pack of manifest 01.. by `body` deflated (or `raw`), consistently: under
    its new hash, named by a new index and pointer, so that only its content is wrong."""
    data = raw if raw is not None else PACK_MAGIC + zlib.compress(body)
    (old_key,) = [key for key in store.entries if key.startswith("packs/")]
    del store.entries[old_key]
    store.entries[f"packs/{digest(data).hex()}"] = data
    (index_key,) = [key for key in store.entries if key.startswith("policyindexes/")]
    index = store.entries.pop(index_key).replace(bytes.fromhex(old_key[6:]), digest(data))
    store.entries[f"policyindexes/{digest(index).hex()}"] = index
    store.entries[ONE] = digest(index)


def delta(prefix: int, suffix: int, middle: bytes) -> bytes:
    return (
        prefix.to_bytes(4, "big")
        + suffix.to_bytes(4, "big")
        + len(middle).to_bytes(4, "big")
        + middle
    )


@pytest.mark.parametrize(
    ("body", "raw", "message"),
    [
        # The reference's length past the body; a delta's header or middle past it.
        ((9).to_bytes(4, "big") + b"ref", None, "truncated"),
        ((3).to_bytes(4, "big") + b"ref" + delta(3, 0, b"")[:-1], None, "truncated"),
        ((3).to_bytes(4, "big") + b"ref" + delta(0, 0, b"abc")[:-1], None, "truncated"),
        # More of the reference than it has, or an overlap of prefix and suffix.
        ((3).to_bytes(4, "big") + b"ref" + delta(4, 0, b""), None, "past its reference"),
        ((3).to_bytes(4, "big") + b"ref" + delta(2, 2, b""), None, "past its reference"),
        # No zlib stream, a stream cut short, bytes after its end, one inflating past the bound.
        (b"", PACK_MAGIC + b"not zlib", "not a zlib stream"),
        (b"", PACK_MAGIC + zlib.compress(b"\0" * 1000)[:-3], "truncated"),
        (b"", PACK_MAGIC + zlib.compress(b"\0" * 1000) + b"x", "truncated"),
        (b"", PACK_MAGIC + zlib.compress(bytes(MAXIMUM_INFLATED + 1)), "inflates past"),
        # A reference no document could be (each delta could rebuild that much), and more
        # documents than the index lists for the pack (3).
        (
            (MAXIMUM_ENTRY_SIZE + 1).to_bytes(4, "big") + bytes(MAXIMUM_ENTRY_SIZE + 1),
            None,
            "reference larger than an entry",
        ),
        ((3).to_bytes(4, "big") + b"ref" + delta(3, 0, b"") * 4, None, "more documents"),
    ],
)
def test_a_delta_pack_framed_wrong_is_damage(body: bytes, raw: bytes | None, message: str) -> None:
    store = MemoryStore()
    history = History(store)
    docs = similar(3)
    history.put_policies(b"\x01" * 32, docs)
    rewritten_pack(store, body, raw=raw)
    with pytest.raises(DamagedEntry, match=message):
        history.get_policies(b"\x01" * 32, docs)


def test_a_delta_pack_rewritten_consistently_with_another_middle_is_refused() -> None:
    """A pack whose deltas are well framed but one middle altered (the pack re-hashed, a new
    index and pointer naming it): that document no longer hashes to its name."""
    store = MemoryStore()
    history = History(store)
    docs = similar(3)
    history.put_policies(b"\x01" * 32, docs)
    (pack,) = entries(store, "packs")
    body = bytearray(zlib.decompress(pack[len(PACK_MAGIC) :]))
    body[-1] ^= 1  # the last document's last middle byte (the suffix is the reference's)
    rewritten_pack(store, bytes(body))
    with pytest.raises(DamagedEntry, match="no policy"):
        history.get_policies(b"\x01" * 32, docs)
    rewritten_pack(store, bytes(body[:-1]) + bytes([body[-1] ^ 1]))  # as it was: read again
    assert history.get_policies(b"\x01" * 32, docs) == docs


def test_deltas_agree_with_a_byte_by_byte_comparison_and_read_back() -> None:
    """The prefix and suffix a delta keeps, found by comparing slices (with a guess that is
    right, wrong, or past the end), are the byte loop's; documents of every kind (alike, unlike,
    empty, shorter or longer than the reference, up to 300 KB) read back as written."""
    rnd = random.Random(29)

    def matching(a: bytes, b: bytes, limit: int) -> int:
        count = 0
        while count < limit and a[count] == b[count]:
            count += 1
        return count

    for _ in range(2000):
        base = rnd.randbytes(rnd.choice([0, 1, 5, 70, 300, 5000]))
        document, reference = (mutated(rnd, base) for _ in range(2))
        limit = min(len(document), len(reference))
        prefix = _common_prefix(document, memoryview(reference), limit, rnd.randint(0, limit + 3))
        assert prefix == matching(document, reference, limit)
        rest = limit - prefix
        suffix = _common_suffix(document, memoryview(reference), rest, rnd.randint(0, rest + 3))
        assert suffix == matching(document[::-1], reference[::-1], rest)
    for round_ in range(20):
        store = MemoryStore()
        base = rnd.randbytes(rnd.choice([10, 3000, 60_000]))
        docs = {digest(d): d for d in (mutated(rnd, base) for _ in range(rnd.randint(1, 300)))}
        docs |= {digest(d): d for d in (rnd.randbytes(rnd.randint(0, 300_000)) for _ in range(3))}
        History(store).put_policies(bytes([round_]) * 32, docs)
        assert History(store).get_policies(bytes([round_]) * 32, docs) == docs
        assert max(map(len, store.entries.values())) <= MAXIMUM_ENTRY_SIZE


def mutated(rnd: random.Random, base: bytes) -> bytes:
    """`base` with up to three insertions, deletions or flipped bits."""
    data = bytearray(base)
    for _ in range(rnd.randint(0, 3)):
        at = rnd.randint(0, len(data))
        operation = rnd.randint(0, 2)
        if operation == 0:
            data[at:at] = rnd.randbytes(rnd.randint(0, 50))
        elif operation == 1:
            del data[at : at + rnd.randint(0, 50)]
        elif data:
            data[min(at, len(data) - 1)] ^= 1
    return bytes(data)


def test_digests_are_each_documents_sha256() -> None:
    """`digests`, which hashes the prefix documents share once, gives each document's own
    sha256: for documents alike (a long shared start, then each its own bytes), unlike, small,
    empty, and a document differing from the one before inside what they otherwise share."""
    rnd = random.Random(7)
    for _ in range(300):
        base = rnd.randbytes(rnd.choice([0, 100, 5000, 60_000]))
        docs = [
            mutated(rnd, base) if rnd.random() < 0.8 else rnd.randbytes(rnd.randint(0, 9000))
            for _ in range(rnd.randint(0, 30))
        ]
        assert digests(docs) == [hashlib.sha256(document).digest() for document in docs]
    rules = rnd.randbytes(50_000)
    alike = [rules + b"%d" % index for index in range(50)]
    alike[30] = rules[:9000] + b"!" + rules[9001:] + b"30"
    assert digests(alike) == [hashlib.sha256(document).digest() for document in alike]
