"""Manifests, policies and transitions, content-addressed, under a signed head.

Layout (as the original's `internal/history`):
- `manifests/<sha256>` → manifest bytes, `policies/<sha256>` → policy (initdata) bytes;
- `transitions/<sha256>` → `ManifestHash ‖ PreviousTransitionHash` (64 bytes), the root's
  previous hash being 32 zero bytes, so the transitions form a hash chain;
- `transitions/latest` → `TransitionHash ‖ ECDSA-P384 signature over that raw hash` with the
  seed-derived transaction signing key;
- `generations/<transition hash>` → how many manifests the chain ending there holds (8 bytes,
  big-endian) ‖ an ECDSA-P384 signature over it with the head's key, beyond the original: a
  restarted Coordinator learns the history's length in one read instead of walking it back
  (1000 reads after 1000 updates, each a round trip to the API server on ConfigMaps). Written
  before the head moves, for transitions this process wrote after a counted one; where it is
  missing (a history written before), the chain is walked as before;
- `authorities/<transition hash>-<sealer>` → that state's CA (mesh CA key and certificates),
  sealed with a seed-derived key (`contrast.ca.sealed`), in the slot of that seed (`sealer_id`).
  Beyond the original: every replica, and every restart, serves one manifest with the same mesh
  CA, so workloads certified by different replicas trust each other, and no Coordinator has to be
  alive to hand the mesh CA key over.

No entry may exceed `MAXIMUM_ENTRY_SIZE` (1 MiB, what a ConfigMap holds), in any backend, so a
history can move between backends. Beyond the original, so that a manifest of 10 000 workloads
(about 1.9 MB) fits and costs a handful of writes instead of one per policy:
- a manifest larger than that is stored as `chunks/<sha256>` pieces, each at most 1 MiB, and
  `manifests/<sha256>` holds `CHUNKED_MAGIC ‖ chunk hashes`; a read joins them and checks the
  whole against the manifest's name, as for a plain entry;
- a manifest's policy documents are packed: `packs/<sha256>` → `PACK_MAGIC ‖ zlib(reference
  length ‖ reference ‖ (prefix ‖ suffix ‖ middle length ‖ middle)*)`, each document the lengths of
  the prefix and suffix it shares with the pack's first document (the reference) and the bytes
  between, deflated (each pack at most 1 MiB, inflating to at most `MAXIMUM_INFLATED`): generated
  policies are the same ~50 KB of rules around each pod's data, so 10 000 of them (568 MB) are
  about 2.6 MB in 3 packs, not 568 MB in 556. `policyindexes/<sha256>` → `INDEX_MAGIC ‖ (pack
  hash ‖ count ‖ policy hashes)*` (chunked like a manifest when large), and
  `policysets/<manifest hash>` → the hash of that index. The pointer is not content-addressed,
  but everything it reaches is, and every document read is rebuilt and re-hashed against the
  hash the manifest lists, so an altered pointer or a pack rewritten under its new hash can only
  make a policy missing (an error), never different. An update keeps the packs of the manifest it
  follows that are still mostly used and packs only the rest. Stores written before packs
  (`policies/<sha256>`, one per document) and packs written before deltas (length-prefixed
  documents, told apart by their first byte: a length's zero, not the magic's `c`) are still
  read, and kept by updates as any pack.

Entries are written before the head and the head is replaced by compare-and-swap, so a crash at any
point leaves the old head (plus unreferenced entries, a CA sealed by a seed that died with its
process among them) or the new one. A manifest's packs, index and pointer, and a chunked
manifest's chunks and index, are each written as one batch (`Store.put_many`): on files one sync
for the batch instead of one per entry, with every entry's data durable before any of them is
renamed into place, and all of them before `put_many` returns, so before the head can move.
Every read re-hashes, and the head's signature is checked, so tampering shows up as an error,
never as a silently different state.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed, decode_dss_signature

from contrast.history.errors import (
    BadSignature,
    ConcurrentUpdate,
    DamagedEntry,
    EntryTooLarge,
    HashMismatch,
    HistoryError,
)
from contrast.history.store import Store

T = TypeVar("T")

HASH_SIZE = 32
ZERO_HASH = bytes(HASH_SIZE)
LATEST_KEY = "transitions/latest"
# A chain longer than this is not a history we wrote: refuse rather than loop.
MAXIMUM_GENERATIONS = 1_000_000
# The data of one ConfigMap (https://kubernetes.io/docs/concepts/configuration/configmap/).
MAXIMUM_ENTRY_SIZE = 1024 * 1024
KINDS = (
    "manifests",
    "policies",
    "transitions",
    "authorities",
    "chunks",
    "packs",
    "policyindexes",
    "policysets",
    "generations",
)
CHUNKED_MAGIC = b"contrast-chunked-v1\n"
INDEX_MAGIC = b"contrast-policy-index-v1\n"
PACK_MAGIC = b"contrast-policy-pack-v2\n"
# What a delta pack may inflate to: 64 entries' worth, so a pack read is bounded in memory.
MAXIMUM_INFLATED = 64 * MAXIMUM_ENTRY_SIZE
# What a chunked entry may hold in all: far above 10 000 workloads, far below the memory of a
# Coordinator; an index naming more chunks than this is refused before any is read.
MAXIMUM_CHUNKED_SIZE = 256 * 1024 * 1024
_LENGTH = 4
_COUNT = 8
GENERATION_LABEL = b"contrast-history-generation-v1\n"
# A shared prefix shorter than this is hashed with the rest, not kept (`_PrefixHashes`).
_SHARED_HASHED = 4096
# Transitions written and counts read or written by one History, kept for the next update.
_REMEMBERED = 16


def check_size(what: str, data: bytes) -> None:
    if len(data) > MAXIMUM_ENTRY_SIZE:
        raise EntryTooLarge(
            f"the {what} is {len(data)} bytes; a history entry holds at most {MAXIMUM_ENTRY_SIZE}"
            " (the size of a Kubernetes ConfigMap)",
            hint="make it smaller: fewer or smaller policies, shorter manifest",
        )


def digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class _PrefixHashes:
    """sha256 of documents that begin with part of one reference, that part hashed once.

    A manifest's generated policies begin with the same ~44 KB (the rules): the hash state after
    `reference[:n]` is kept (for a few lengths n) and copied, and only the rest of each document
    is hashed. Callers compare that part of the document with the reference first (a memcmp), so
    each result is exactly the document's sha256.
    """

    def __init__(self, reference: memoryview) -> None:
        self._reference = reference
        self._states: dict[int, hashlib._Hash] = {}

    def digest(self, prefix: int, *rest: bytes | memoryview) -> bytes:
        """The sha256 of `reference[:prefix]` followed by `rest`."""
        if prefix < _SHARED_HASHED:
            state = hashlib.sha256(self._reference[:prefix])
        else:
            kept = self._states.get(prefix)
            if kept is None:
                if len(self._states) >= _REMEMBERED:
                    self._states.clear()
                kept = self._states[prefix] = hashlib.sha256(self._reference[:prefix])
            state = kept.copy()
        for part in rest:
            state.update(part)
        return state.digest()


def digests(documents: Sequence[bytes]) -> list[bytes]:
    """Each document's sha256, in order, the prefix each shares with a reference hashed once
    (`_PrefixHashes`; at 10 000 generated policies 130 MB hashed instead of 568 MB). The
    reference is the last document that shared less than `_SHARED_HASHED` with the one before:
    the first real-size policy after a small one, every one of documents that are not alike."""
    reference = memoryview(b"")
    hashes = _PrefixHashes(reference)
    names: list[bytes] = []
    prefix = 0
    for document in documents:
        prefix = _common_prefix(document, reference, min(len(document), len(reference)), prefix)
        if prefix < _SHARED_HASHED:
            reference = memoryview(document)
            hashes = _PrefixHashes(reference)
            prefix = len(document)
        names.append(hashes.digest(prefix, memoryview(document)[prefix:]))
    return names


@dataclass(frozen=True)
class Transition:
    """One step of the history: this manifest follows that transition."""

    manifest_hash: bytes
    previous_transition_hash: bytes

    def to_bytes(self) -> bytes:
        return self.manifest_hash + self.previous_transition_hash

    @classmethod
    def from_bytes(cls, data: bytes) -> Transition:
        if len(data) != 2 * HASH_SIZE:
            raise DamagedEntry(f"a transition is {2 * HASH_SIZE} bytes, found {len(data)}")
        return cls(data[:HASH_SIZE], data[HASH_SIZE:])

    @property
    def digest(self) -> bytes:
        return digest(self.to_bytes())


@dataclass(frozen=True)
class LatestTransition:
    """The head: the newest transition's hash and its signature."""

    transition_hash: bytes
    signature: bytes

    def to_bytes(self) -> bytes:
        return self.transition_hash + self.signature

    @classmethod
    def from_bytes(cls, data: bytes) -> LatestTransition:
        """Split a stored head; a head too short or without a DER signature is damaged."""
        if len(data) <= HASH_SIZE:
            raise DamagedEntry(f"the history head is truncated ({len(data)} bytes)")
        try:
            decode_dss_signature(data[HASH_SIZE:])
        except ValueError:
            raise DamagedEntry(
                "the history head's signature is not a DER ECDSA signature (truncated or altered)"
            ) from None
        return cls(data[:HASH_SIZE], data[HASH_SIZE:])

    @classmethod
    def sign(cls, transition_hash: bytes, key: ec.EllipticCurvePrivateKey) -> LatestTransition:
        # The raw 32-byte hash is signed as is (Prehashed), as the original's SignASN1 does.
        signature = key.sign(transition_hash, ec.ECDSA(Prehashed(hashes.SHA256())))
        return cls(transition_hash, signature)

    def verify(self, key: ec.EllipticCurvePublicKey) -> None:
        try:
            key.verify(self.signature, self.transition_hash, ec.ECDSA(Prehashed(hashes.SHA256())))
        except InvalidSignature:
            raise BadSignature(
                "the history head is not signed by this Coordinator's seed",
                hint="the stored state was tampered with, or the seed belongs to another"
                " deployment",
            ) from None


def _generation_digest(transition_hash: bytes, count: int) -> bytes:
    """What a generation entry's signature covers: a label, the transition and its count."""
    return digest(GENERATION_LABEL + transition_hash + count.to_bytes(_COUNT, "big"))


def _remember(memory: dict[bytes, T], key: bytes, value: T) -> None:
    memory[key] = value
    while len(memory) > _REMEMBERED:
        del memory[next(iter(memory))]


def _authority_key(transition_hash: bytes, sealer: bytes) -> str:
    return f"authorities/{transition_hash.hex()}-{sealer.hex()}"


def transition_hashes(manifests: list[bytes], *, start: bytes = ZERO_HASH) -> list[bytes]:
    """The transition hashes of the history that holds `manifests` (oldest first), in order.

    A client that got the manifests (GetManifests) recomputes the chain with this, to check it
    against the head the Coordinator reports and against the one it saw before; `start` is the
    transition the first of them follows, for a GetManifests answered from a known transition on.
    """
    chain: list[bytes] = []
    previous = start
    for manifest in manifests:
        previous = Transition(digest(manifest), previous).digest
        chain.append(previous)
    return chain


def _unpack(data: bytes, name: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The documents of a pack, in order, each with its sha256: a delta pack (`PACK_MAGIC`) or
    one written before (length-prefixed documents, whose first byte is a length's zero); framing
    that reaches past the pack's end, or a delta past its reference, is damage."""
    if data.startswith(PACK_MAGIC):
        yield from _undelta(data, name)
        return
    at = 0
    while at < len(data):
        end = at + _LENGTH + int.from_bytes(data[at : at + _LENGTH], "big")
        if end > len(data):
            raise DamagedEntry(f"the policy pack {name.hex()} is truncated")
        document = data[at + _LENGTH : end]
        yield digest(document), document
        at = end


def _inflated(data: bytes, name: bytes) -> bytes:
    """A delta pack's body: its zlib stream inflated, whole and at most `MAXIMUM_INFLATED`."""
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(memoryview(data)[len(PACK_MAGIC) :], MAXIMUM_INFLATED)
    except zlib.error:
        raise DamagedEntry(f"the policy pack {name.hex()} is not a zlib stream") from None
    if inflater.unconsumed_tail:
        raise DamagedEntry(f"the policy pack {name.hex()} inflates past {MAXIMUM_INFLATED} bytes")
    if not inflater.eof or inflater.unused_data:
        raise DamagedEntry(f"the policy pack {name.hex()} is truncated")
    return body


def _undelta(data: bytes, name: bytes) -> Iterator[tuple[bytes, bytes]]:
    body = _inflated(data, name)
    view = memoryview(body)
    reference_end = _LENGTH + int.from_bytes(view[:_LENGTH], "big")
    if len(body) < _LENGTH or reference_end > len(body):
        raise DamagedEntry(f"the policy pack {name.hex()} is truncated")
    reference = view[_LENGTH:reference_end]
    size = len(reference)
    if size > MAXIMUM_ENTRY_SIZE:  # no document was: each delta would rebuild up to this much
        raise DamagedEntry(f"the policy pack {name.hex()} has a reference larger than an entry")
    hashes = _PrefixHashes(reference)  # each document's prefix is the reference's, as rebuilt
    at = reference_end
    while at < len(body):
        if at + _DELTA.size > len(body):
            raise DamagedEntry(f"the policy pack {name.hex()} is truncated")
        prefix, suffix, middle = _DELTA.unpack_from(body, at)
        at += _DELTA.size
        if at + middle > len(body):
            raise DamagedEntry(f"the policy pack {name.hex()} is truncated")
        if prefix + suffix > size:
            raise DamagedEntry(f"the policy pack {name.hex()} has a delta past its reference")
        parts = (view[at : at + middle], reference[size - suffix :])
        yield hashes.digest(prefix, *parts), b"".join((reference[:prefix], *parts))
        at += middle


def _common_prefix(document: bytes, reference: memoryview, limit: int, guess: int) -> int:
    """How many first bytes `document` shares with `reference` (at most `limit`).

    Compared as slices (`startswith` on a memoryview: a memcmp, no copy), not byte by byte:
    first the `guess` (the previous document's, right for a manifest's generated policies),
    then runs that double, then halving inside the run that differs.
    """
    at = guess if 0 < guess <= limit and document.startswith(reference[:guess]) else 0
    if at and (at == limit or document[at] != reference[at]):
        return at  # the guess was right: one compare and one byte
    step = 64
    while at < limit:
        end = min(at + step, limit)
        if document.startswith(reference[at:end], at):
            at, step = end, 2 * step
            continue
        while end - at > 1:  # document[at:end] differs, document[:at] matches
            middle = (at + end) // 2
            if document.startswith(reference[at:middle], at):
                at = middle
            else:
                end = middle
        return at
    return at


def _common_suffix(document: bytes, reference: memoryview, limit: int, guess: int) -> int:
    """How many last bytes `document` shares with `reference` (at most `limit`): as
    `_common_prefix`, from the end (`endswith` up to a position)."""
    whole, size = len(document), len(reference)
    matched = guess if 0 < guess <= limit and document.endswith(reference[size - guess :]) else 0
    if matched and (
        matched == limit or document[whole - matched - 1] != reference[size - matched - 1]
    ):
        return matched
    step = 64
    while matched < limit:
        end = min(matched + step, limit)
        if document.endswith(reference[size - end : size - matched], 0, whole - matched):
            matched, step = end, 2 * step
            continue
        while end - matched > 1:
            middle = (matched + end) // 2
            if document.endswith(reference[size - middle : size - matched], 0, whole - matched):
                matched = middle
            else:
                end = middle
        return matched
    return matched


def _addressed(kind: str, data: bytes, batch: dict[str, bytes]) -> bytes:
    """Add `data` to `batch` at `<kind>/<its hash>`; its hash."""
    check_size(kind.removesuffix("s"), data)
    name = digest(data)
    batch[f"{kind}/{name.hex()}"] = data
    return name


def _chunked(kind: str, data: bytes, batch: dict[str, bytes]) -> bytes:
    """Add `data` to `batch` at `<kind>/<its hash>`, split into `chunks/` (added first) when
    larger than one entry; its hash."""
    if len(data) <= MAXIMUM_ENTRY_SIZE:
        return _addressed(kind, data, batch)
    if len(data) > MAXIMUM_CHUNKED_SIZE:
        raise EntryTooLarge(
            f"the {kind.removesuffix('s')} is {len(data)} bytes; the history holds at most"
            f" {MAXIMUM_CHUNKED_SIZE}"
        )
    hashes = [
        _addressed("chunks", data[start : start + MAXIMUM_ENTRY_SIZE], batch)
        for start in range(0, len(data), MAXIMUM_ENTRY_SIZE)
    ]
    name = digest(data)
    batch[f"{kind}/{name.hex()}"] = CHUNKED_MAGIC + b"".join(hashes)
    return name


_DELTA = struct.Struct(">III")  # a delta pack's document: prefix, suffix, middle lengths


def _deflate_bound(size: int) -> int:
    """The most `size` bytes fed to zlib can add to its output when finished (zlib's
    deflateBound is size + size/4096 + size/16384 + 13, plus the stream's 6; rounded up)."""
    return size + (size >> 10) + 64


class _Packer:
    """A pack being filled: documents as deltas against its first one, its reference, deflated.

    Each document is the lengths of the reference's prefix and suffix it shares and the bytes
    between them: a manifest's generated policies (the same rules, ~50 KB, around each pod's
    data) take a few KB each instead of ~55 KB, and deflated (zlib level 1: the pods' data are
    much alike) a few hundred bytes: 10 000 of them are 2.6 MB in 3 entries, not 568 MB in 556.
    The entry's size is known without finishing the stream: what zlib has output, plus at
    most `_deflate_bound` of what it was fed since, flushed (Z_SYNC_FLUSH) when that bound would
    pass an entry, and the pack is finished when even then the next document would not fit.
    """

    def __init__(self, reference: bytes) -> None:
        self.members: list[bytes] = []
        self._reference = memoryview(reference)
        self._deflater = zlib.compressobj(1)
        self._parts: list[bytes] = [PACK_MAGIC]
        self._output = len(PACK_MAGIC)
        self._unflushed = self._inflated = 0
        self._prefix = self._suffix = 0  # the previous document's: the next one's first guess
        self._feed(len(reference).to_bytes(_LENGTH, "big"), self._reference)

    def _feed(self, *parts: bytes | memoryview) -> None:
        for part in parts:
            output = self._deflater.compress(part)
            if output:
                self._parts.append(output)
                self._output += len(output)
            self._unflushed += len(part)
            self._inflated += len(part)

    def _fits(self, more: int) -> bool:
        if self._inflated + more > MAXIMUM_INFLATED:
            return False
        if self._output + _deflate_bound(self._unflushed + more) <= MAXIMUM_ENTRY_SIZE:
            return True
        output = self._deflater.flush(zlib.Z_SYNC_FLUSH)
        self._parts.append(output)
        self._output += len(output)
        self._unflushed = 0
        return self._output + _deflate_bound(more) <= MAXIMUM_ENTRY_SIZE

    def add(self, policy_hash: bytes, document: bytes) -> bool:
        """Add `document` unless the pack would outgrow an entry (its first is always added)."""
        reference = self._reference
        limit = min(len(document), len(reference))
        prefix = _common_prefix(document, reference, limit, self._prefix)
        suffix = _common_suffix(document, reference, limit - prefix, self._suffix)
        middle = memoryview(document)[prefix : len(document) - suffix]
        if not self._fits(_DELTA.size + len(middle)) and self.members:
            return False
        self.members.append(policy_hash)
        self._feed(_DELTA.pack(prefix, suffix, len(middle)), middle)
        self._prefix, self._suffix = prefix, suffix
        return True

    def encode(self) -> bytes:
        """The pack, its stream finished (no document can be added after)."""
        self._parts.append(self._deflater.flush())
        return b"".join(self._parts)


class History:
    """Typed access to a store holding the manifest history."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._transitions: dict[bytes, Transition] = {}  # written through this object
        self._counts: dict[bytes, int] = {}  # generations read (signature checked) or written

    def _put_addressed(self, kind: str, data: bytes) -> bytes:
        batch: dict[str, bytes] = {}
        name = _addressed(kind, data, batch)
        self.store.put(*batch.popitem())
        return name

    def _put_chunked(self, kind: str, data: bytes) -> bytes:
        """`data` at `<kind>/<its hash>`, split into `chunks/` when larger than one entry."""
        batch: dict[str, bytes] = {}
        name = _chunked(kind, data, batch)
        self._write(batch)
        return name

    def _write(self, batch: dict[str, bytes]) -> None:
        """The entries of `batch`, in order (each one refers only to those before it)."""
        if len(batch) == 1:
            self.store.put(*batch.popitem())
        else:
            self.store.put_many(batch)

    def _get_chunked(self, kind: str, name: bytes) -> bytes:
        """The entry `_put_chunked` wrote, joined and checked against `name` as a whole."""
        key = f"{kind}/{name.hex()}"
        data = self._required(key)
        if digest(data) == name:
            return data
        hashes = data[len(CHUNKED_MAGIC) :]
        if (
            not data.startswith(CHUNKED_MAGIC)
            or len(hashes) % HASH_SIZE
            or len(hashes) // HASH_SIZE > MAXIMUM_CHUNKED_SIZE // MAXIMUM_ENTRY_SIZE
        ):
            raise HashMismatch(
                f"{self.store.describe(key)} does not hash to its name: the store was tampered with"
            )
        joined = b"".join(
            self._get_addressed("chunks", hashes[i : i + HASH_SIZE])
            for i in range(0, len(hashes), HASH_SIZE)
        )
        if digest(joined) != name:
            raise HashMismatch(
                f"the chunks of {self.store.describe(key)} do not hash to its name: the store was"
                " tampered with"
            )
        return joined

    def _required(self, key: str) -> bytes:
        """The entry at `key`, which the history refers to, so its absence is damage."""
        data = self.store.get(key)
        if data is None:
            raise DamagedEntry(
                f"the history has no entry {self.store.describe(key)}",
                hint="the store is incomplete",
            )
        return data

    def _get_addressed(self, kind: str, name: bytes) -> bytes:
        key = f"{kind}/{name.hex()}"
        data = self._required(key)
        if digest(data) != name:
            raise HashMismatch(
                f"{self.store.describe(key)} does not hash to its name: the store was tampered with"
            )
        return data

    def put_manifest(self, manifest: bytes) -> bytes:
        return self._put_chunked("manifests", manifest)

    def get_manifest(self, manifest_hash: bytes) -> bytes:
        return self._get_chunked("manifests", manifest_hash)

    def put_policies(
        self,
        manifest_hash: bytes,
        documents: Mapping[bytes, bytes],
        *,
        follows: bytes | None = None,
    ) -> None:
        """Store the policy documents (by hash) of the manifest `manifest_hash`, packed.

        `follows` names the manifest this one replaces: its packs that are at least half used by
        this manifest are kept as they are, so an update that changes a few workloads writes a
        pack of those few, not all 10 000 again.
        """
        index: list[tuple[bytes, list[bytes]]] = []
        covered: set[bytes] = set()
        if follows is not None:
            for pack_hash, members in self._index_of(follows) or []:
                used = [h for h in members if h in documents]
                if 2 * len(used) >= len(members):
                    index.append((pack_hash, members))
                    covered.update(used)
        # Packs, index and pointer are written as one batch (`Store.put_many`): one sync for
        # all, and the pointer in place only once everything it reaches is.
        batch: dict[str, bytes] = {}
        packer: _Packer | None = None
        for policy_hash, document in documents.items():
            if policy_hash in covered:
                continue
            check_size("policy", document)
            if packer is None or not packer.add(policy_hash, document):
                if packer is not None:
                    index.append((_addressed("packs", packer.encode(), batch), packer.members))
                packer = _Packer(document)
                packer.add(policy_hash, document)
        if packer is not None:
            index.append((_addressed("packs", packer.encode(), batch), packer.members))
        encoded = INDEX_MAGIC + b"".join(
            pack_hash + len(members).to_bytes(_LENGTH, "big") + b"".join(members)
            for pack_hash, members in index
        )
        index_hash = _chunked("policyindexes", encoded, batch)
        batch[f"policysets/{manifest_hash.hex()}"] = index_hash
        self._write(batch)

    def _index_of(self, manifest_hash: bytes) -> list[tuple[bytes, list[bytes]]] | None:
        """The packs holding a manifest's policies and what each holds; None: stored unpacked."""
        key = f"policysets/{manifest_hash.hex()}"
        pointer = self.store.get(key)
        if pointer is None:
            return None
        if len(pointer) != HASH_SIZE:
            raise DamagedEntry(f"{self.store.describe(key)} is not a hash ({len(pointer)} bytes)")
        data = self._get_chunked("policyindexes", pointer)
        if not data.startswith(INDEX_MAGIC):
            raise DamagedEntry(f"the policy index {pointer.hex()} is not one")
        index: list[tuple[bytes, list[bytes]]] = []
        view, at = memoryview(data), len(INDEX_MAGIC)
        while at < len(data):
            head = at + HASH_SIZE + _LENGTH
            if head > len(data):
                raise DamagedEntry(f"the policy index {pointer.hex()} is truncated")
            count = int.from_bytes(view[at + HASH_SIZE : head], "big")
            end = head + count * HASH_SIZE
            if end > len(data):
                raise DamagedEntry(f"the policy index {pointer.hex()} is truncated")
            members = [bytes(view[i : i + HASH_SIZE]) for i in range(head, end, HASH_SIZE)]
            index.append((bytes(view[at : at + HASH_SIZE]), members))
            at = end
        return index

    def get_policies(self, manifest_hash: bytes, wanted: Iterable[bytes]) -> dict[bytes, bytes]:
        """The documents `wanted` (policy hashes) of the manifest `manifest_hash`, each re-hashed.

        A document the packs lack, or one whose bytes do not hash to its name, is an error naming
        it; a manifest stored before packs existed has its documents read one by one.
        """
        wanted = list(wanted)
        index = self._index_of(manifest_hash)
        if index is None:
            return {h: self.get_policy(h) for h in wanted}
        missing = set(wanted)
        found: dict[bytes, bytes] = {}
        for pack_hash, members in index:
            if missing.isdisjoint(members):
                continue
            pack = self._get_addressed("packs", pack_hash)
            for count, (name, document) in enumerate(_unpack(pack, pack_hash), 1):
                if count > len(members):  # a delta of a few bytes may rebuild a large document
                    raise DamagedEntry(
                        f"the policy pack {pack_hash.hex()} holds more documents than its index"
                        f" lists ({len(members)})"
                    )
                if name in missing:
                    found[name] = document
                    missing.discard(name)
        if missing:
            first = min(missing).hex()
            raise DamagedEntry(
                f"the history has no policy {first} of manifest {manifest_hash.hex()}"
                f" ({len(missing)} missing; policy set"
                f" {self.store.describe(f'policysets/{manifest_hash.hex()}')})",
                hint="the store is incomplete",
            )
        return {h: found[h] for h in wanted}

    def put_policy(self, policy: bytes) -> bytes:
        return self._put_addressed("policies", policy)

    def get_policy(self, policy_hash: bytes) -> bytes:
        return self._get_addressed("policies", policy_hash)

    def has_policy(self, policy_hash: bytes) -> bool:
        return self.store.get(f"policies/{policy_hash.hex()}") is not None

    def put_transition(self, transition: Transition) -> bytes:
        name = self._put_addressed("transitions", transition.to_bytes())
        _remember(self._transitions, name, transition)
        return name

    def get_transition(self, transition_hash: bytes) -> Transition:
        return Transition.from_bytes(self._get_addressed("transitions", transition_hash))

    def has_latest(self) -> bool:
        return self.store.get(LATEST_KEY) is not None

    def latest_bytes(self) -> bytes | None:
        """The head exactly as stored, unparsed and unverified.

        For a replica that compares it with the head it verified: equal bytes are that head (the
        comparison covers every byte read), anything else takes the full, verified path.
        """
        return self.store.get(LATEST_KEY)

    def get_latest_unverified(self) -> LatestTransition | None:
        """The head without its signature checked: only to decide that recovery is needed."""
        data = self.store.get(LATEST_KEY)
        if data is None:
            return None
        try:
            return LatestTransition.from_bytes(data)
        except DamagedEntry as error:
            raise DamagedEntry(f"{self.store.describe(LATEST_KEY)}: {error}") from None

    def get_latest(self, key: ec.EllipticCurvePublicKey) -> LatestTransition:
        latest = self.get_latest_unverified()
        if latest is None:
            raise HistoryError("the history is empty")
        latest.verify(key)
        return latest

    def set_latest(
        self,
        expected: LatestTransition | None,
        transition_hash: bytes,
        key: ec.EllipticCurvePrivateKey,
    ) -> LatestTransition:
        """Move the head to `transition_hash` if it is still `expected` (the commit point).

        Its generation is stored first when this object wrote the transition and knows the
        count of the one it follows (see the module docstring).
        """
        self._put_generation(transition_hash, key)
        latest = LatestTransition.sign(transition_hash, key)
        self.store.compare_and_swap(
            LATEST_KEY, None if expected is None else expected.to_bytes(), latest.to_bytes()
        )
        return latest

    def generation(self, transition_hash: bytes, key: ec.EllipticCurvePublicKey) -> int | None:
        """How many manifests the chain ending at `transition_hash` holds, from its stored count.

        None when no count is stored for it (then only walking the chain tells). A count not
        signed by `key` (the head's), or not one, is damage.
        """
        if transition_hash == ZERO_HASH:
            return 0
        known = self._counts.get(transition_hash)
        if known is not None:
            return known
        name = f"generations/{transition_hash.hex()}"
        data = self.store.get(name)
        if data is None:
            return None
        count = int.from_bytes(data[:_COUNT], "big")
        if len(data) <= _COUNT or not 1 <= count <= MAXIMUM_GENERATIONS:
            raise DamagedEntry(f"{self.store.describe(name)} is not a count of manifests")
        try:
            key.verify(
                data[_COUNT:],
                _generation_digest(transition_hash, count),
                ec.ECDSA(Prehashed(hashes.SHA256())),
            )
        except InvalidSignature:
            raise HashMismatch(
                f"{self.store.describe(name)} is not signed by this Coordinator's seed: the store"
                " was tampered with"
            ) from None
        _remember(self._counts, transition_hash, count)
        return count

    def _put_generation(self, transition_hash: bytes, key: ec.EllipticCurvePrivateKey) -> None:
        transition = self._transitions.get(transition_hash)
        if transition is None:
            return
        previous = self.generation(transition.previous_transition_hash, key.public_key())
        if previous is None:  # follows a history written before counts: walked when needed
            return
        count = previous + 1
        signature = key.sign(
            _generation_digest(transition_hash, count), ec.ECDSA(Prehashed(hashes.SHA256()))
        )
        self.store.put(
            f"generations/{transition_hash.hex()}", count.to_bytes(_COUNT, "big") + signature
        )
        _remember(self._counts, transition_hash, count)

    def get_authority(self, transition_hash: bytes, *, sealer: bytes) -> bytes | None:
        """The CA of the state at `transition_hash` sealed by the seed `sealer` names, if stored."""
        return self.store.get(_authority_key(transition_hash, sealer))

    def put_authority(self, transition_hash: bytes, sealed: bytes, *, sealer: bytes) -> bytes:
        """Store a state's CA sealed by `sealer` unless one is there; the one that is there after.

        Two replicas setting the same update at once mint two CAs for one transition: the first
        write wins and both use it, so a transition never has two mesh CAs. Replicas with
        different seeds (racing on the first manifest) write to different slots, and only the slot
        of the seed that signed the head is ever read.
        """
        check_size("sealed CA", sealed)
        key = _authority_key(transition_hash, sealer)
        try:
            self.store.compare_and_swap(key, None, sealed)
        except ConcurrentUpdate:
            existing = self.store.get(key)
            if existing is None:
                raise DamagedEntry(f"{self.store.describe(key)} vanished while written") from None
            return existing
        return sealed

    def names(self, kind: str) -> list[str]:
        """The names of every stored entry of `kind` (one of `KINDS`, or `transitions`' head)."""
        return self.store.names(kind)

    def walk(self, transition_hash: bytes) -> Iterator[tuple[bytes, Transition]]:
        """Transitions from `transition_hash` back to the root, newest first."""
        current = transition_hash
        for _ in range(MAXIMUM_GENERATIONS):
            if current == ZERO_HASH:
                return
            transition = self.get_transition(current)
            yield current, transition
            current = transition.previous_transition_hash
        raise DamagedEntry("the transition chain does not end: the store was tampered with")

    def manifests(self, transition_hash: bytes) -> list[bytes]:
        """Every manifest of the chain ending at `transition_hash`, oldest first."""
        chain = [self.get_manifest(t.manifest_hash) for _, t in self.walk(transition_hash)]
        return chain[::-1]
