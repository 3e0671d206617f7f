"""The Coordinator's state machine, independent of gRPC.

States (as the original's `stateguard`): no manifest → ready after the first SetManifest; after a
restart with a stored history, recovery mode until Recover gets the seed back (from a seed share
owner, or from a peer replica: `contrast.coordinator.peers`). State changes are serialised by one
lock and committed by the history's compare-and-swap of its head, so a crash leaves the old or
the new state, and of several replicas racing, exactly one wins.

Several replicas share one history. A replica follows a manifest set through another one by
reading the head before every certificate, update and history answer (a poll on use, not a
watch: a watch event arrives some time after the write, and in that time a replica would certify
against a superseded manifest; one read of a small entry is cheap, and on Kubernetes a GET
without resourceVersion is a quorum read). A head it has not seen must be signed by its seed and
descend from its own: anything else is a rollback or a fork, and it issues nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.atls.peer import EvidenceVerifier
from contrast.atls.reportdata import report_data
from contrast.attestation.errors import AttestationError
from contrast.attestation.evidence import Evidence
from contrast.ca.authority import CertificateAuthority, pem_certificate
from contrast.ca.errors import SealedAuthorityDamaged
from contrast.ca.sealed import seal, sealer_id, unseal
from contrast.coordinator.errors import (
    Conflict,
    EvidenceRefused,
    InvalidRequest,
    NonceRefused,
    NotACoordinator,
    NotReady,
    PermissionDenied,
    StateUnavailable,
    StoredStateDamaged,
    history_damaged,
)
from contrast.coordinator.metrics import CoordinatorMetrics
from contrast.coordinator.nonces import NonceRegistry
from contrast.history.errors import BadSignature, ConcurrentUpdate, DamagedEntry, HistoryError
from contrast.history.history import (
    ZERO_HASH,
    History,
    LatestTransition,
    Transition,
    digest,
    digests,
)
from contrast.manifest.errors import ManifestError
from contrast.manifest.model import Manifest, Role
from contrast.manifest.ownership import OwnershipError, verify_update
from contrast.seed.engine import SeedEngine
from contrast.seed.errors import SeedError
from contrast.seed.shares import SeedShareDocument, load_public_key_hex

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class Mode(StrEnum):
    NO_MANIFEST = "no manifest"
    RECOVERY = "recovery"
    READY = "ready"


@dataclass(frozen=True)
class State:
    """One immutable snapshot of the active state."""

    seed: SeedEngine
    manifest: Manifest
    manifest_bytes: bytes
    authority: CertificateAuthority
    latest: LatestTransition
    # How many manifests the history holds; None after a restart until first needed (counting
    # walks the chain back, one read per past update, so a restart does not).
    generation: int | None
    verifier: EvidenceVerifier
    # Each workload secret id's secret, derived once (HKDF per certificate was about a twentieth
    # of issuing one): a function of the seed, which every state a `replace` makes keeps, and of
    # ids the active manifests name, so it stays as small as they are.
    workload_secrets: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class SetManifestResult:
    root_ca: bytes
    mesh_ca: bytes
    # Only for the first manifest: the seed, encrypted to each seed share owner.
    seed_shares: SeedShareDocument | None


@dataclass(frozen=True)
class ManifestHistory:
    manifests: list[bytes]
    policies: list[bytes]
    root_ca: bytes
    mesh_ca: bytes
    latest: LatestTransition
    # What `manifests[0]` follows (ZERO_HASH: the whole history), and the history's length.
    previous_transition_hash: bytes = ZERO_HASH
    generation: int = 0


@dataclass(frozen=True)
class MeshCertificate:
    mesh_ca: bytes
    cert_chain: bytes
    root_ca: bytes
    workload_secret: bytes | None


@dataclass(frozen=True)
class Handover:
    """What a ready replica hands a recovering peer (as the original's MeshAPI.Recover)."""

    seed: bytes = field(repr=False)
    salt: bytes = field(repr=False)
    mesh_ca_key: bytes = field(repr=False)  # PKCS#8 PEM
    transition_hash: bytes


@dataclass(frozen=True)
class _StoredHistory:
    manifest: Manifest  # the active (newest) one
    manifest_bytes: bytes


def stored_state_error(
    error: HistoryError | SealedAuthorityDamaged,
) -> StoredStateDamaged | StateUnavailable:
    """A history failure as the Coordinator reports it: damaged data, or a store it cannot use."""
    if isinstance(error, DamagedEntry | SealedAuthorityDamaged):
        return history_damaged(error.explain())
    return StateUnavailable(f"the stored history cannot be used: {error.explain()}")


def _new_seed(manifest: Manifest) -> tuple[SeedEngine, SeedShareDocument]:
    """A new seed for the first manifest, shared among its seed share owners."""
    seed = SeedEngine.generate()
    owners = [load_public_key_hex(key) for key in manifest.seedshare_owner_pub_keys]
    shares = SeedShareDocument.create(
        seed.seed, seed.salt, owners, threshold=manifest.seedshare_threshold
    )
    return seed, shares


def _check_seed_kept(current: Manifest, update: Manifest) -> None:
    """Refuse an update that changes who holds the seed: the shares already handed out stay."""
    if update.seedshare_owner_pub_keys != current.seedshare_owner_pub_keys:
        raise PermissionDenied(
            "an update cannot change SeedshareOwnerPubKeys: the seed is already shared"
        )
    if update.seedshare_threshold != current.seedshare_threshold:
        raise PermissionDenied(
            "an update cannot change SeedshareThreshold: the seed is already shared"
        )


class Coordinator:
    def __init__(
        self,
        history: History,
        *,
        verifier_for: Callable[[Manifest], EvidenceVerifier],
        clock: Clock = utc_now,
        metrics: CoordinatorMetrics | None = None,
    ) -> None:
        self._history = history
        self._verifier_for = verifier_for
        self._clock = clock
        self.metrics = metrics if metrics is not None else CoordinatorMetrics()
        self._nonces = NonceRegistry()
        self._lock = threading.Lock()
        self._state: State | None = None
        self._recovering = history.has_latest()

    @property
    def mode(self) -> Mode:
        self._notice_history()
        if self._state is not None:  # also when it got its state while the history was read
            return Mode.READY
        return Mode.RECOVERY if self._recovering else Mode.NO_MANIFEST

    def _notice_history(self) -> None:
        """Without a manifest, a history another replica started makes this one recover.

        `_recovering` means something only while there is no state: the read of the store is
        unlocked (the readiness probe asks) and may end after peer recovery or a first
        SetManifest gave this replica its state, and then sets a flag no one reads. (Read as it
        was, it made a ready replica refuse every SetManifest as "in recovery mode".)
        """
        if self._state is None and not self._recovering:
            try:
                started = self._history.has_latest()
            except HistoryError as error:
                log.warning("cannot read the history: %s", error.explain())
                return
            if started and self._state is None:
                self._recovering = True

    @property
    def generation(self) -> int:
        """How many manifests the active history holds (0 before the first).

        After a restart it is the count stored beside the head (`History.generation`), read on
        recovery; in a history written before counts were stored it is counted once, on first
        use, by walking the chain back. A state that follows a counted one carries the count on.
        """
        state = self._state
        if state is None:
            return 0
        if state.generation is not None:
            return state.generation
        try:
            count = sum(1 for _ in self._history.walk(state.latest.transition_hash))
        except HistoryError as error:
            raise stored_state_error(error) from None
        self._counted(state, count)
        return count

    def _counted(self, state: State, count: int) -> None:
        """Keep the count of `state`'s manifests, if it is still the active state."""
        with self._lock:
            if self._state is state:
                self._state = replace(state, generation=count)
                self.metrics.manifest_generation.set(count)

    def active_state(self) -> State:
        """The state to answer from, for servers beside the gRPC ones (the transit engine).

        As every RPC: the newest in the history, NotReady without a manifest or in recovery.
        """
        return self._ready_state()

    def _ready_state(self) -> State:
        """The state to answer from: the newest in the history (see the module docstring)."""
        state = self._state
        if state is not None:
            return self._follow(state)
        self._notice_history()
        if self._recovering:
            raise NotReady(
                "the Coordinator is in recovery mode", hint="run contrast recover with a seed share"
            )
        raise NotReady("no manifest is set", hint="run contrast set")

    def _follow(self, state: State) -> State:
        """`state`, or the newer one another replica committed; a fresh read of the head each time.

        The common case, an unchanged head, costs one read and one comparison of its raw bytes
        with those of the head this replica verified: no parsing, no signature check. Any byte
        that differs (a new head, or a tampered one) takes the verified path below.
        """
        try:
            stored = self._history.latest_bytes()
        except HistoryError as error:
            raise stored_state_error(error) from None
        if stored == state.latest.to_bytes():
            return state
        with self._lock:
            current = self._state
            assert current is not None
            try:
                head = self._history.get_latest_unverified()
                if head == current.latest:
                    return current
                if head is None:
                    raise history_damaged("the history head is gone: the store was reset")
                head.verify(current.seed.transaction_signing_key.public_key())
                links = self._links_since(head, current.latest.transition_hash)
                manifests = self._read_manifests([t for _, t in links or []])
            except BadSignature:
                raise StoredStateDamaged(
                    "the history head is not signed by this deployment's seed",
                    hint="the stored state was tampered with; no certificate is issued",
                ) from None
            except HistoryError as error:
                raise stored_state_error(error) from None
            if links is None:
                raise StoredStateDamaged(
                    f"the history head {head.transition_hash.hex()} does not descend from this"
                    f" replica's {current.latest.transition_hash.hex()}: the history was rolled"
                    " back or forked",
                    hint="no certificate is issued; investigate the store",
                )
            if not links:  # the same transition, signed anew: nothing else changes
                self._state = replace(current, latest=head)
                return self._state
            manifest_bytes, manifest = manifests[0]
            generation = None if current.generation is None else current.generation + len(links)
            try:
                self._state = self._activate(
                    current.seed,
                    manifest,
                    manifest_bytes,
                    latest=head,
                    generation=generation,
                    verifier=self._verifier_for(manifest),
                )
            except HistoryError as error:
                raise stored_state_error(error) from None
            log.info(
                "followed the history to generation %s (a manifest set through another replica)",
                generation if generation is not None else "not counted",
            )
            return self._state

    def _links_since(
        self, head: LatestTransition, ancestor: bytes
    ) -> list[tuple[bytes, Transition]] | None:
        """The transitions from `head` back to `ancestor` (excluded); None if it is not one."""
        links: list[tuple[bytes, Transition]] = []
        for transition_hash, transition in self._history.walk(head.transition_hash):
            if transition_hash == ancestor:
                return links
            links.append((transition_hash, transition))
        return None

    def _read_manifests(self, transitions: Sequence[Transition]) -> list[tuple[bytes, Manifest]]:
        """The manifests of `transitions`, each valid and with all its policy documents stored."""
        manifests: list[tuple[bytes, Manifest]] = []
        checked: set[str] = set()
        for transition in transitions:
            data = self._history.get_manifest(transition.manifest_hash)
            try:
                manifest = Manifest.from_bytes(data)
            except ManifestError as error:
                raise history_damaged(
                    f"the stored manifest {transition.manifest_hash.hex()} is not valid:"
                    f" {error.explain()}"
                ) from None
            unchecked = [bytes.fromhex(h) for h in manifest.policies.keys() - checked]
            self._history.get_policies(transition.manifest_hash, unchecked)
            checked.update(manifest.policies)
            manifests.append((data, manifest))
        return manifests

    # UserAPI ---------------------------------------------------------------------------------

    def set_manifest(
        self,
        manifest_bytes: bytes,
        policies: Sequence[bytes],
        *,
        previous_transition_hash: bytes = b"",
        owner_public_key: bytes = b"",
        signature: bytes = b"",
    ) -> SetManifestResult:
        if self._state is not None:
            self._ready_state()  # follow a manifest set through another replica first
        with self._lock:
            self._notice_history()
            state = self._state
            if state is None and self._recovering:
                raise NotReady(
                    "the Coordinator is in recovery mode",
                    hint=self._recovery_hint(manifest_bytes, previous_transition_hash),
                )
            if state is not None and self._made_the_head(
                state,
                manifest_bytes=manifest_bytes,
                previous_transition_hash=previous_transition_hash,
                owner_public_key=owner_public_key,
                signature=signature,
            ):
                authority = state.authority
                return SetManifestResult(authority.root_pem, authority.mesh_ca_pem, None)
            # Once a manifest is set, only its owners may send one: their signature over the raw
            # bytes is checked before anything parses them.
            if state is not None:
                self._authorize_update(
                    state,
                    manifest_bytes=manifest_bytes,
                    previous_transition_hash=previous_transition_hash,
                    owner_public_key=owner_public_key,
                    signature=signature,
                )
            manifest, verifier, documents = self._read_request(manifest_bytes, policies)
            generation: int | None
            shares: SeedShareDocument | None
            if state is None:
                seed, shares = _new_seed(manifest)
                generation = 1
            else:
                _check_seed_kept(state.manifest, manifest)
                seed, shares = state.seed, None
                generation = None if state.generation is None else state.generation + 1
            latest, authority = self._store(state, manifest, manifest_bytes, documents, seed)
            self._state = self._activate(
                seed,
                manifest,
                manifest_bytes,
                latest=latest,
                generation=generation,
                verifier=verifier,
                authority=authority,
            )
            authority = self._state.authority
        return SetManifestResult(authority.root_pem, authority.mesh_ca_pem, shares)

    def _store(
        self,
        state: State | None,
        manifest: Manifest,
        manifest_bytes: bytes,
        documents: Mapping[str, bytes],
        seed: SeedEngine,
    ) -> tuple[LatestTransition, CertificateAuthority]:
        """Write the manifest, its policies and its transition to the history, then make it latest.

        The latest pointer moves only if it is still `state`'s (compare and swap): a manifest set
        through another replica meanwhile is a conflict, and when that was the first manifest
        this replica turns to recovery, since it holds no seed for it.
        """
        expected_latest = None if state is None else state.latest
        previous = ZERO_HASH if state is None else state.latest.transition_hash
        try:
            self._history.put_policies(
                digest(manifest_bytes),
                {bytes.fromhex(h): documents[h] for h in manifest.policies},
                follows=None if state is None else digest(state.manifest_bytes),
            )
            manifest_hash = self._history.put_manifest(manifest_bytes)
            transition_hash = self._history.put_transition(Transition(manifest_hash, previous))
            authority = self._authority_for(seed, transition_hash)
            latest = self._history.set_latest(
                expected_latest, transition_hash, seed.transaction_signing_key
            )
        except ConcurrentUpdate:
            if state is None:
                self._recovering = True  # another replica set the first manifest
            raise Conflict(
                "the manifest changed concurrently (set through another Coordinator replica)",
                hint="run contrast verify to see the current manifest, then set again",
            ) from None
        except HistoryError as error:
            raise stored_state_error(error) from None
        return latest, authority

    def _recovery_hint(self, manifest_bytes: bytes, previous_transition_hash: bytes) -> str:
        """What to do, and for a first manifest that the stored history starts with, why.

        A Coordinator killed after the first manifest's head moved took the only copy of the
        seed with it if the response with the seed shares never left: the same request sent
        again meets the history that seed signed, and nothing can open it.
        """
        hint = "run contrast recover"
        if previous_transition_hash not in (b"", ZERO_HASH):
            return hint
        try:
            head = self._history.get_latest_unverified()
        except HistoryError:
            return hint
        if (
            head is None
            or head.transition_hash != Transition(digest(manifest_bytes), ZERO_HASH).digest
        ):
            return hint
        return (
            "this manifest is the first of the stored history, set before the Coordinator"
            " restarted: run contrast recover with the seed shares that set answered; if that set"
            " never answered, its seed was lost with the Coordinator and only a new, empty state"
            " takes this manifest as a first one again"
        )

    def _read_request(
        self, manifest_bytes: bytes, policies: Sequence[bytes]
    ) -> tuple[Manifest, EvidenceVerifier, dict[str, bytes]]:
        """The manifest, its verifier, and the policy documents by hash; each one must be sent."""
        try:
            manifest = Manifest.from_bytes(manifest_bytes)
            verifier = self._verifier_for(manifest)
        except ManifestError as error:
            raise InvalidRequest(error.explain()) from None
        names = digests(policies)  # each one's sha256, the rules they share hashed once
        documents = {name.hex(): policy for name, policy in zip(names, policies, strict=True)}
        missing = sorted(set(manifest.policies) - set(documents))
        if missing:
            raise InvalidRequest(
                f"no policy document was sent for the manifest's policy hash {missing[0]}",
                hint="send the policies (initdata) of every workload in the manifest",
            )
        return manifest, verifier, documents

    def _made_the_head(
        self,
        state: State,
        *,
        manifest_bytes: bytes,
        previous_transition_hash: bytes,
        owner_public_key: bytes,
        signature: bytes,
    ) -> bool:
        """Whether this update is the one that made the head: a retry of an answer that was lost.

        A Coordinator killed after the head moved, or a response lost on the way, leaves the
        owner without an answer; sent again, the same update finds its own transition at the
        head. It is answered as it was, and the head does not move again, if its signature
        verifies for the transition it followed, with the owner keys of that one's manifest.
        The first manifest is never answered twice: its seed shares went out once.
        """
        if not previous_transition_hash or previous_transition_hash == ZERO_HASH:
            return False
        made = Transition(digest(manifest_bytes), previous_transition_hash).digest
        if made != state.latest.transition_hash:
            return False
        try:
            followed = self._history.get_transition(previous_transition_hash)
            (_, owners), *_ = self._read_manifests([followed])
        except HistoryError as error:
            raise stored_state_error(error) from None
        try:
            verify_update(
                owner_public_key,
                signature,
                manifest_bytes,
                previous_transition_hash,
                allowed_digests=owners.workload_owner_key_digests,
            )
        except OwnershipError as error:
            raise PermissionDenied(error.message, hint=error.hint) from None
        log.info("answered a retried update that had already moved the head")
        return True

    def _authorize_update(
        self,
        state: State,
        *,
        manifest_bytes: bytes,
        previous_transition_hash: bytes,
        owner_public_key: bytes,
        signature: bytes,
    ) -> None:
        if previous_transition_hash and previous_transition_hash != state.latest.transition_hash:
            raise Conflict(
                "the update follows a transition that is no longer the latest",
                hint="run contrast verify to see the current manifest, then set again",
            )
        if not owner_public_key or not signature:
            raise PermissionDenied(
                "a manifest is already set: updates need a workload owner's signature",
                hint="pass --workload-owner-key with a key the active manifest lists",
            )
        try:
            verify_update(
                owner_public_key,
                signature,
                manifest_bytes,
                state.latest.transition_hash,
                allowed_digests=state.manifest.workload_owner_key_digests,
            )
        except OwnershipError as error:
            raise PermissionDenied(error.message, hint=error.hint) from None

    def _activate(
        self,
        seed: SeedEngine,
        manifest: Manifest,
        manifest_bytes: bytes,
        *,
        latest: LatestTransition,
        generation: int | None,
        verifier: EvidenceVerifier,
        authority: CertificateAuthority | None = None,
    ) -> State:
        if authority is None:
            authority = self._authority_for(seed, latest.transition_hash)
        if generation is not None:
            self.metrics.manifest_generation.set(generation)
        return State(seed, manifest, manifest_bytes, authority, latest, generation, verifier)

    def _authority_for(self, seed: SeedEngine, transition_hash: bytes) -> CertificateAuthority:
        """The CA of the state at `transition_hash`: the sealed one stored, else a new one.

        A new mesh CA key for every manifest, as the original: a mesh CA pins one manifest, while
        the seed-derived root CA spans all of them. It is sealed into the history before the head
        moves, so every replica (and this one after a restart) serves the same mesh CA.
        """
        key = seed.authority_sealing_key()
        sealer = sealer_id(key)
        sealed = self._history.get_authority(transition_hash, sealer=sealer)
        if sealed is None:
            mesh_key = ec.generate_private_key(ec.SECP384R1())
            minted = CertificateAuthority.create(seed.root_ca_key, mesh_key, now=self._clock())
            sealed = self._history.put_authority(
                transition_hash, seal(key, transition_hash, minted), sealer=sealer
            )
        try:
            return unseal(key, transition_hash, sealed, seed.root_ca_key)
        except SealedAuthorityDamaged as error:
            raise stored_state_error(error) from None

    def get_manifests(self, *, since: bytes = b"", policies: bool = True) -> ManifestHistory:
        """The history's manifests, oldest first, and the active manifest's policy documents.

        With `since` (a transition hash the client saw) that the chain contains, only the
        manifests after it, and at least the active one: the walk stops there, so the cost
        follows the updates the client missed, not the history's length. Otherwise all of them
        (the original's answer), so a client whose `since` is missing sees the whole chain.
        Without `policies`, no documents are read or sent: a caller that checks only the chain
        (`set`) would otherwise receive every workload's initdata (~545 MB at 10 000).
        """
        state = self._ready_state()
        try:
            links: list[Transition] = []
            previous = ZERO_HASH
            for transition_hash, transition in self._history.walk(state.latest.transition_hash):
                if since and transition_hash == since and links:
                    previous = since
                    break
                links.append(transition)
                if since and transition_hash == since:
                    previous = transition.previous_transition_hash
                    break
            manifests = [self._history.get_manifest(t.manifest_hash) for t in reversed(links)]
            if previous == ZERO_HASH and state.generation is None:  # walked to the root
                self._counted(state, len(links))
            documents: dict[bytes, bytes] = {}
            if policies:
                wanted = [bytes.fromhex(h) for h in state.manifest.policies]
                documents = self._history.get_policies(digest(state.manifest_bytes), wanted)
        except HistoryError as error:
            raise stored_state_error(error) from None
        return ManifestHistory(
            manifests,
            list(documents.values()),
            state.authority.root_pem,
            state.authority.mesh_ca_pem,
            state.latest,
            previous_transition_hash=previous,
            generation=self.generation,
        )

    def recover(
        self,
        seed: bytes,
        salt: bytes,
        *,
        expected_transition_hash: bytes = b"",
        mesh_ca_key: bytes = b"",
    ) -> None:
        """Leave recovery mode with the seed, from a seed share owner or a peer replica.

        A peer also hands over its mesh CA key (as the original); it must be the one sealed in
        the history for the peer's state, or the peer and this replica would disagree.
        """
        with self._lock:
            self._notice_history()
            if self._state is not None:
                raise NotReady("the Coordinator is not in recovery mode: already recovered")
            if not self._recovering:
                raise NotReady("there is nothing to recover", hint="run contrast set")
            try:
                engine = SeedEngine(seed, salt)
            except SeedError as error:
                raise InvalidRequest(error.explain()) from None
            try:
                latest = self._history.get_latest(engine.transaction_signing_key.public_key())
                stored = self._check_stored_history(latest)
                generation = self._history.generation(
                    latest.transition_hash, engine.transaction_signing_key.public_key()
                )
                # The head the seed share owner last saw must be in the stored chain: a newer
                # head is a legitimate update, a missing one means the store was rolled back or
                # replaced. The walk stops at it: usually the head itself, or a few updates back.
                contains = not expected_transition_hash or any(
                    transition_hash == expected_transition_hash
                    for transition_hash, _ in self._history.walk(latest.transition_hash)
                )
            except BadSignature:
                raise PermissionDenied(
                    "the seed does not belong to this Coordinator's history",
                    hint="use the seed share of this deployment",
                ) from None
            except HistoryError as error:
                raise stored_state_error(error) from None
            if not contains:
                raise PermissionDenied(
                    "the stored history does not contain the transition you last verified:"
                    " the Coordinator's state was rolled back or replaced",
                    hint="do not trust this deployment's state; investigate its volume",
                )
            try:
                state = self._activate(
                    engine,
                    stored.manifest,
                    stored.manifest_bytes,
                    latest=latest,
                    generation=generation,
                    verifier=self._verifier_for(stored.manifest),
                )
            except HistoryError as error:
                raise stored_state_error(error) from None
            if mesh_ca_key and latest.transition_hash == expected_transition_hash:
                handed = serialization.load_pem_private_key(mesh_ca_key, None)
                if handed.public_key() != state.authority.mesh_key.public_key():
                    raise PermissionDenied(
                        "the peer's mesh CA key is not the one sealed in the history"
                    )
            self._state = state
            self._recovering = False
        if generation is None:  # no count stored: ready without it, walked in the background
            threading.Thread(
                target=self._count_quietly, name="count-generation", daemon=True
            ).start()

    def _count_quietly(self) -> None:
        try:
            self.generation  # noqa: B018  (counted and kept by the property)
        except (StoredStateDamaged, StateUnavailable) as error:
            log.warning("cannot count the history's manifests: %s", error.explain())

    def _check_stored_history(self, latest: LatestTransition) -> _StoredHistory:
        """Read back what the signed head serves, so recovery ends with a servable state.

        The head's transition, the active manifest and every policy document it lists must be
        present and hash to their names (the history checks that on each read), and the
        manifest must be valid: a Coordinator that left recovery mode with a gap would issue
        certificates and then fail every GetManifests. Older transitions and manifests are
        re-hashed when a GetManifests reads them (only their bytes are served), so a restart
        costs the same after 1000 updates as after one.
        """
        head = self._history.get_transition(latest.transition_hash)
        manifest_bytes, manifest = self._read_manifests([head])[0]
        return _StoredHistory(manifest=manifest, manifest_bytes=manifest_bytes)

    def stored_manifest_unverified(self) -> tuple[bytes, Manifest] | None:
        """The head's transition hash and manifest, NOT verified: what a peer must attest to.

        As the original's ResetState: before it has the seed, a recovering replica can only read
        the head unchecked; it uses the manifest to decide which peers may hand it the seed, and
        `recover` then checks the head's signature with that seed.
        """
        try:
            head = self._history.get_latest_unverified()
            if head is None:
                return None
            transition = self._history.get_transition(head.transition_hash)
            manifest = Manifest.from_bytes(self._history.get_manifest(transition.manifest_hash))
        except ManifestError as error:
            message = f"the stored manifest is not valid: {error.explain()}"
            raise StoredStateDamaged(message) from None
        except HistoryError as error:
            raise stored_state_error(error) from None
        return head.transition_hash, manifest

    # MeshAPI ---------------------------------------------------------------------------------

    def handover(self, nonce: bytes, public_key: bytes, evidence: Evidence) -> Handover:
        """The seed for a recovering peer, if its evidence is a Coordinator of this manifest.

        The evidence must bind `public_key` to our nonce (used once), pass the active manifest's
        reference values, and carry a policy hash whose entry has role `coordinator`; the caller
        seals the answer to `public_key` (`contrast.coordinator.handover`), so only that TEE can
        read it.
        """
        state = self._ready_state()
        now = self._clock()
        self._consume(nonce, now)
        try:
            peer = state.verifier.verify(
                evidence, report_data=report_data(public_key, nonce), now=now
            )
        except AttestationError as error:
            self.metrics.attestation_failures.inc()
            raise EvidenceRefused(
                f"peer recovery refused, the evidence does not pass the active manifest"
                f" ({error.reason}): {error.explain()}"
            ) from None
        policy = peer.policy_hash.hex()
        entry = state.manifest.policies.get(policy)
        if entry is None or entry.role is not Role.COORDINATOR:
            self.metrics.attestation_failures.inc()
            what = (
                "not in the active manifest"
                if entry is None
                else "a workload's, not a Coordinator's (its entry has no role coordinator)"
            )
            raise NotACoordinator(f"peer recovery refused: policy hash {policy} is {what}")
        mesh_key = state.authority.mesh_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        log.info("handing the seed to an attested peer Coordinator")
        return Handover(state.seed.seed, state.seed.salt, mesh_key, state.latest.transition_hash)

    def _consume(self, nonce: bytes, now: datetime) -> None:
        if not self._nonces.consume(nonce, now):
            raise NonceRefused(
                "the nonce is unknown, expired or already used",
                hint="get a fresh nonce and new evidence for it",
            )

    def new_nonce(self) -> bytes:
        return self._nonces.issue(self._clock())

    def new_mesh_certificate(
        self, nonce: bytes, public_key: bytes, evidence: Evidence
    ) -> MeshCertificate:
        state = self._ready_state()
        now = self._clock()
        self._consume(nonce, now)
        try:
            key = serialization.load_der_public_key(public_key)
        except ValueError:
            raise InvalidRequest("the public key is not PKIX DER") from None
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise InvalidRequest("mesh certificates are issued for ECDSA keys only")
        try:
            peer = state.verifier.verify(
                evidence, report_data=report_data(public_key, nonce), now=now
            )
        except AttestationError as error:
            self.metrics.attestation_failures.inc()
            raise PermissionDenied(
                f"evidence refused ({error.reason}): {error.explain()}"
            ) from None
        entry = state.manifest.policies.get(peer.policy_hash.hex())
        if entry is None:
            self.metrics.attestation_failures.inc()
            raise PermissionDenied(
                f"policy hash {peer.policy_hash.hex()} is not in the active manifest"
            )
        leaf = state.authority.issue_mesh_certificate_der(
            key, entry.sans, now=now, workload_secret_id=entry.workload_secret_id or None
        )
        secret = None
        if entry.workload_secret_id:
            secret = state.workload_secrets.get(entry.workload_secret_id)
            if secret is None:
                secret = state.seed.workload_secret(entry.workload_secret_id)
                state.workload_secrets[entry.workload_secret_id] = secret
        self.metrics.mesh_certificates.inc()
        chain = pem_certificate(leaf) + state.authority.intermediate_pem
        return MeshCertificate(state.authority.mesh_ca_pem, chain, state.authority.root_pem, secret)
