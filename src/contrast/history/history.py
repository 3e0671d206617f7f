"""Manifests, policies and transitions, content-addressed, under a signed head.

Layout (as the original's `internal/history`):
- `manifests/<sha256>` → manifest bytes, `policies/<sha256>` → policy (initdata) bytes;
- `transitions/<sha256>` → `ManifestHash ‖ PreviousTransitionHash` (64 bytes), the root's
  previous hash being 32 zero bytes, so the transitions form a hash chain;
- `transitions/latest` → `TransitionHash ‖ ECDSA-P384 signature over that raw hash` with the
  seed-derived transaction signing key;
- `authorities/<transition hash>-<sealer>` → that state's CA (mesh CA key and certificates),
  sealed with a seed-derived key (`contrast.ca.sealed`), in the slot of that seed (`sealer_id`).
  Beyond the original: every replica, and every restart, serves one manifest with the same mesh
  CA, so workloads certified by different replicas trust each other, and no Coordinator has to be
  alive to hand the mesh CA key over.

No entry may exceed `MAXIMUM_ENTRY_SIZE` (1 MiB, what a ConfigMap holds), in any backend, so a
history can move between backends.

Entries are written before the head and the head is replaced by compare-and-swap, so a crash at any
point leaves the old head (plus unreferenced entries, a CA sealed by a seed that died with its
process among them) or the new one. Every read re-hashes, and the
head's signature is checked, so tampering shows up as an error, never as a silently different
state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

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

HASH_SIZE = 32
ZERO_HASH = bytes(HASH_SIZE)
LATEST_KEY = "transitions/latest"
# A chain longer than this is not a history we wrote: refuse rather than loop.
MAXIMUM_GENERATIONS = 1_000_000
# The data of one ConfigMap (https://kubernetes.io/docs/concepts/configuration/configmap/).
MAXIMUM_ENTRY_SIZE = 1024 * 1024
KINDS = ("manifests", "policies", "transitions", "authorities")


def check_size(what: str, data: bytes) -> None:
    if len(data) > MAXIMUM_ENTRY_SIZE:
        raise EntryTooLarge(
            f"the {what} is {len(data)} bytes; a history entry holds at most {MAXIMUM_ENTRY_SIZE}"
            " (the size of a Kubernetes ConfigMap)",
            hint="make it smaller: fewer or smaller policies, shorter manifest",
        )


def digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


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


def _authority_key(transition_hash: bytes, sealer: bytes) -> str:
    return f"authorities/{transition_hash.hex()}-{sealer.hex()}"


def transition_hashes(manifests: list[bytes]) -> list[bytes]:
    """The transition hashes of the history that holds `manifests` (oldest first), in order.

    A client that got the manifests (GetManifests) recomputes the chain with this, to check it
    against the head the Coordinator reports and against the one it saw before.
    """
    chain: list[bytes] = []
    previous = ZERO_HASH
    for manifest in manifests:
        previous = Transition(digest(manifest), previous).digest
        chain.append(previous)
    return chain


class History:
    """Typed access to a store holding the manifest history."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _put_addressed(self, kind: str, data: bytes) -> bytes:
        check_size(kind.removesuffix("s"), data)
        name = digest(data)
        self.store.put(f"{kind}/{name.hex()}", data)
        return name

    def _get_addressed(self, kind: str, name: bytes) -> bytes:
        key = f"{kind}/{name.hex()}"
        data = self.store.get(key)
        if data is None:
            raise DamagedEntry(
                f"the history has no entry {self.store.describe(key)}",
                hint="the store is incomplete",
            )
        if digest(data) != name:
            raise HashMismatch(
                f"{self.store.describe(key)} does not hash to its name: the store was tampered with"
            )
        return data

    def put_manifest(self, manifest: bytes) -> bytes:
        return self._put_addressed("manifests", manifest)

    def get_manifest(self, manifest_hash: bytes) -> bytes:
        return self._get_addressed("manifests", manifest_hash)

    def put_policy(self, policy: bytes) -> bytes:
        return self._put_addressed("policies", policy)

    def get_policy(self, policy_hash: bytes) -> bytes:
        return self._get_addressed("policies", policy_hash)

    def has_policy(self, policy_hash: bytes) -> bool:
        return self.store.get(f"policies/{policy_hash.hex()}") is not None

    def put_transition(self, transition: Transition) -> bytes:
        return self._put_addressed("transitions", transition.to_bytes())

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
        """Move the head to `transition_hash` if it is still `expected` (the commit point)."""
        latest = LatestTransition.sign(transition_hash, key)
        self.store.compare_and_swap(
            LATEST_KEY, None if expected is None else expected.to_bytes(), latest.to_bytes()
        )
        return latest

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
