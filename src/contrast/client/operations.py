"""`set`, `verify` and `recover`: each attests the Coordinator before it sends anything.

The Coordinator is attested with the validators of the local manifest: its evidence must meet the
manifest's reference values and carry a policy hash the manifest gives the `coordinator` role (or
one named with `--coordinator-policy-hash`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import grpc
from cryptography.hazmat.primitives.asymmetric import ec

from contrast.api import userapi_pb2
from contrast.api.convert import seed_shares_from_proto
from contrast.api.services import UserApiClient
from contrast.atls.client import AttestedConnection, connect_attested, rpc_message
from contrast.atls.reportdata import public_key_der
from contrast.boundedfile import read_bounded
from contrast.client import setrequest
from contrast.client.errors import ClientError
from contrast.client.resources import collect_policies
from contrast.client.setrequest import SetRequest
from contrast.client.transitions import LastSeen, RolledBack, check_history, last_seen, record
from contrast.client.workspace import (
    LATEST_TRANSITION,
    MESH_CA,
    ROOT_CA,
    SEED_SHARES,
    Workspace,
    WorkspaceError,
    load_seedshare_owner_key,
    load_workload_owner_key,
    read_file,
)
from contrast.files import write_atomically
from contrast.history.history import ZERO_HASH, digest
from contrast.kuberesource import yamlmemo
from contrast.kuberesource.yamlmemo import YamlMemo
from contrast.manifest.model import MANIFEST_LIMITS, Manifest
from contrast.manifest.ownership import sign_update
from contrast.manifest.verifier import coordinator_verifier
from contrast.policy import cache as policy_cache
from contrast.policy.cache import written_annotations
from contrast.policy.initdata import Initdata, InitdataError
from contrast.seed import threshold
from contrast.seed.shares import SEED_SHARES_LIMITS, SeedShareDocument

T = TypeVar("T")

# A share file holds one SLIP-0039 mnemonic: 33 words of at most 8 letters for a 256-bit seed,
# about 300 characters. Its text is refused above 4096 characters, its file above 8 KiB.
SHARE_MAX_CHARACTERS = 4096
SHARE_MAX_BYTES = 8 << 10


class OperationFailed(ClientError):
    """The Coordinator refused a request, or its answer does not match the local files."""


@dataclass(frozen=True)
class Target:
    """Where the Coordinator is and how to recognise it."""

    address: str
    manifest_path: Path
    coordinator_policy_hashes: tuple[str, ...] = ()
    timeout: float = 30.0


def load_manifest(path: Path) -> tuple[Manifest, bytes]:
    data = read_file(
        path,
        "manifest",
        MANIFEST_LIMITS.max_bytes,
        hint="run contrast generate first, or pass --manifest",
    )
    return Manifest.from_bytes(data), data


def _connect(target: Target, manifest: Manifest) -> AttestedConnection:
    hashes = target.coordinator_policy_hashes or tuple(manifest.coordinator_policy_hashes)
    verifier = coordinator_verifier(manifest, [bytes.fromhex(h) for h in hashes])
    return connect_attested(target.address, verifier, now=datetime.now(UTC), timeout=target.timeout)


def _call(what: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except grpc.RpcError as error:
        raise OperationFailed(f"{what} failed: {rpc_message(error)}") from None


def _no_manifest_yet(error: grpc.RpcError) -> bool:
    code = error.code() if callable(getattr(error, "code", None)) else None
    return code == grpc.StatusCode.FAILED_PRECONDITION


@dataclass(frozen=True)
class SetResult:
    first: bool
    written: list[Path]
    # A first manifest over a workspace that remembered another history: the head it held.
    replaced_history: bytes | None = None
    # Where the seed shares the new ones replaced were kept (they recover the old state).
    kept_seed_shares: Path | None = None


def set_manifest(
    target: Target,
    workspace: Workspace,
    resources: Path,
    *,
    workload_owner_keys: Sequence[Path] = (),
) -> SetResult:
    """Attest the Coordinator, then set the local manifest with the resources' policies."""
    manifest, manifest_bytes = _filled_manifest(target.manifest_path)
    policies = _matching_policies(manifest, resources, workspace)
    seen = last_seen(workspace)
    exchange = _exchange(
        target,
        manifest,
        manifest_bytes,
        policies,
        seen=seen,
        workspace=workspace,
        workload_owner_keys=workload_owner_keys,
    )
    current, response, after = exchange.current, exchange.response, exchange.after
    head = after.LatestTransition.TransitionHash
    try:
        chain = check_history(seen, after.Manifests, head, start=_start(after))
        replaced = None
    except RolledBack:
        if current is not None:
            raise
        # A first manifest starts a new history: what the workspace saw belongs to another.
        seen, replaced = LastSeen(seen.path, None), seen.transition_hash
        chain = check_history(seen, after.Manifests, head, start=_start(after))
    written = [
        workspace.write_public(ROOT_CA, response.RootCA),
        workspace.write_public(MESH_CA, response.MeshCA),
        record(workspace, seen, chain),
    ]
    kept = None
    if response.HasField("SeedSharesDoc"):
        document = seed_shares_from_proto(response.SeedSharesDoc)
        kept = _keep_previous_seed_shares(workspace, exchange.previous_shares, document.to_json())
        written.append(workspace.write_private(SEED_SHARES, document.to_json()))
    return SetResult(
        first=current is None, written=written, replaced_history=replaced, kept_seed_shares=kept
    )


def _filled_manifest(path: Path) -> tuple[Manifest, bytes]:
    """The local manifest, refused while it still has reference values to fill in."""
    manifest, manifest_bytes = load_manifest(path)
    unfilled = manifest.reference_values.unfilled()
    if unfilled:
        raise OperationFailed(
            f"{path} still has expected-missing reference values: {', '.join(unfilled)}",
            hint="fill them in with your hosts' values (contrast generate listed where),"
            " then set again",
        )
    return manifest, manifest_bytes


def _matching_policies(
    manifest: Manifest, resources: Path, workspace: Workspace
) -> dict[str, bytes]:
    """The resources' policies by hash, refused unless they are exactly the manifest's.

    A policy the manifest lists and no resource has, or the other way round, means the two are
    from different `contrast generate` runs: the Coordinator would admit pods nobody deploys, or
    refuse the ones deployed.
    """
    # generate's YAML memo (the documents of the files it wrote, known by their bytes) and its
    # policy cache (the policy hash of each annotation it wrote, known by the annotation).
    policies = collect_policies(
        resources,
        YamlMemo(workspace.path(yamlmemo.FILE)),
        written_annotations(workspace.path(policy_cache.FILE)),
    )
    missing = sorted(set(manifest.policies) - set(policies))
    if missing:
        raise OperationFailed(
            f"the manifest lists policy {missing[0]}, but no resource under {resources} has it",
            hint="run contrast generate again so that resources and manifest agree",
        )
    unknown = sorted(set(policies) - set(manifest.policies))
    if unknown:
        raise OperationFailed(
            f"a resource under {resources} has policy {unknown[0]}, which the manifest lacks",
            hint="run contrast generate again so that resources and manifest agree",
        )
    return policies


@dataclass(frozen=True)
class _Exchange:
    """What `set_manifest` learnt from the Coordinator over one attested connection."""

    current: userapi_pb2.GetManifestsResponse | None  # None: no manifest was set before
    response: userapi_pb2.SetManifestResponse
    after: userapi_pb2.GetManifestsResponse  # the history since `seen`, the new manifest last
    previous_shares: bytes | None  # the workspace's seed shares, read before a first manifest


def _exchange(
    target: Target,
    manifest: Manifest,
    manifest_bytes: bytes,
    policies: Mapping[str, bytes],
    *,
    seen: LastSeen,
    workspace: Workspace,
    workload_owner_keys: Sequence[Path],
) -> _Exchange:
    """Set the manifest: the first one as is, an update signed over the head it follows.

    The history is read before (an update to a rolled-back history is refused here) and after
    (for the caller to check that it now ends in this manifest).
    """
    connection = _connect(target, manifest)
    try:
        client = UserApiClient(connection.channel, timeout=target.timeout)
        documents = [policies[h] for h in sorted(manifest.policies)]
        # Only what followed the head this workspace saw (the whole history without one), and
        # no policy documents: both checks here (rollback before, the chain after) read only the
        # manifests and the head, and the documents are ~545 MB at 10 000 real-size workloads.
        since = seen.transition_hash or b""
        try:
            current = client.get_manifests(since=since, without_policies=True)
        except grpc.RpcError as error:
            if not _no_manifest_yet(error):
                raise OperationFailed(f"GetManifests failed: {rpc_message(error)}") from None
            current = None
        previous_shares = None
        if current is not None:
            previous = current.LatestTransition.TransitionHash
            # Never update a rolled-back history.
            check_history(seen, current.Manifests, previous, start=_start(current))
            key = _owner_key(workload_owner_keys)
            request = SetRequest(
                manifest_bytes,
                documents,
                previous_transition_hash=previous,
                workload_owner_public_key=public_key_der(key.public_key()),
                signature=sign_update(key, manifest_bytes, previous),
            )
        else:
            request = SetRequest(manifest_bytes, documents, previous_transition_hash=ZERO_HASH)
            previous_shares = _previous_seed_shares(workspace)
        # Written as wire bytes, the documents copied once (client/setrequest.py).
        response = _call(
            "SetManifest",
            lambda: setrequest.set_manifest(connection.channel, request, timeout=target.timeout),
        )
        after = _call(
            "GetManifests", lambda: client.get_manifests(since=since, without_policies=True)
        )
    finally:
        connection.close()
    return _Exchange(current, response, after, previous_shares)


def _start(history: userapi_pb2.GetManifestsResponse) -> bytes:
    """The transition the answer's first manifest follows: the root's for a whole history."""
    return history.PreviousTransitionHash or ZERO_HASH


def _previous_seed_shares(workspace: Workspace) -> bytes | None:
    """The workspace's `seed-shares.json` before a first manifest, read before it is sent.

    A first manifest brings new seed shares, and the old ones must be kept (below): they are
    read, within their bound, before the Coordinator is asked, so that a file that cannot be
    kept refuses the request instead of failing once the new seed exists.
    """
    path = workspace.path(SEED_SHARES)
    try:
        return read_bounded(
            path,
            SEED_SHARES_LIMITS.max_bytes,
            what="the seed shares",
            hint="move it out of the workspace before setting a first manifest",
        )
    except FileNotFoundError:
        return None
    except OSError as error:
        raise WorkspaceError(
            f"cannot read {path}: {error.strerror or error}",
            hint="check the workspace's permissions before setting a manifest",
        ) from None


def _keep_previous_seed_shares(workspace: Workspace, old: bytes | None, new: bytes) -> Path | None:
    """Keep a different `seed-shares.json` before a first manifest replaces it; where it went.

    A Coordinator that answers with new seed shares has a new seed: it lost its state, or it
    is another deployment. The old shares are the only way to recover the old state (a volume
    that comes back), so they are kept, owner-only, under a name derived from their content.
    """
    if old is None or old == new:
        return None
    name = f"seed-shares.replaced-{hashlib.sha256(old).hexdigest()[:16]}.json"
    return workspace.write_private(name, old)


def _owner_key(paths: Sequence[Path]) -> ec.EllipticCurvePrivateKey:
    """The first workload owner key that exists: updates are signed with it."""
    for path in paths:
        if path.exists():
            return load_workload_owner_key(path)
    raise OperationFailed(
        "a manifest is already set, and updating it needs a workload owner key",
        hint="pass --workload-owner-key with a key the active manifest lists",
    )


def decrypt_share(
    workspace: Workspace, *, seedshare_owner_key: Path, seed_shares: Path, output: Path
) -> Path:
    """Open this owner's threshold share into `output` (owner-only) for whoever recovers.

    The Coordinator is not contacted: an owner can do this alone and hand the file, a SLIP-0039
    mnemonic, to the operator who runs `contrast recover --share`.
    """
    document = read_seed_shares(seed_shares)
    mnemonic = threshold.unpack(document.decrypt(load_seedshare_owner_key(seedshare_owner_key)))
    try:
        write_atomically(output, (mnemonic + "\n").encode(), mode=0o600)
    except OSError as error:
        raise WorkspaceError(f"cannot write {output}: {error.strerror or error}") from None
    return output


def read_seed_shares(path: Path) -> SeedShareDocument:
    """The seed share document `contrast set` saved (`--seed`), read within its bound."""
    data = read_file(
        path,
        "seed shares",
        SEED_SHARES_LIMITS.max_bytes,
        hint=f"pass the {SEED_SHARES} contrast set wrote",
    )
    return SeedShareDocument.from_json(data)


def read_share(path: Path) -> str:
    """A share file `decrypt_share` wrote: one SLIP-0039 mnemonic."""
    data = read_file(
        path, "seed share", SHARE_MAX_BYTES, hint="pass the file --decrypt-share-to wrote"
    )
    text = data.decode(errors="replace").strip()
    if not text or len(text) > SHARE_MAX_CHARACTERS:
        raise OperationFailed(f"{path} holds no seed share mnemonic")
    return " ".join(text.split())


@dataclass(frozen=True)
class VerifyResult:
    directory: Path
    manifests: int
    matches: bool
    seen: LastSeen  # what the workspace remembered, so whether rollback could be checked
    # One line per policy of the active manifest that opens the insecure debug shell.
    debug_warnings: tuple[str, ...] = ()


def verify(target: Target, workspace: Workspace) -> VerifyResult:
    """Attest the Coordinator and write what a data owner needs to `verify/`.

    Fails (after writing) if the active manifest is not byte for byte the local one.
    """
    manifest, manifest_bytes = load_manifest(target.manifest_path)
    seen = last_seen(workspace)
    directory = workspace.verify_dir
    output = Workspace(directory)
    since = _verified_until(output, seen)
    connection = _connect(target, manifest)
    try:
        client = UserApiClient(connection.channel, timeout=target.timeout)
        history = _call("GetManifests", lambda: client.get_manifests(since=since))
        first = history.Generation - len(history.Manifests) if _start(history) != ZERO_HASH else 0
        head = history.LatestTransition.TransitionHash
        try:
            if first > 0 and not output.path(f"manifest.{first - 1}.json").exists():
                raise RolledBack("verify/ lacks the older manifests")
            chain = check_history(seen, history.Manifests, head, start=_start(history))
        except RolledBack:
            if not since:
                raise
            # verify/ lacks the older manifests, or the head the workspace saw is older than
            # verify/'s: the whole history decides.
            history = _call("GetManifests", client.get_manifests)
            first = 0
            head = history.LatestTransition.TransitionHash
            chain = check_history(seen, history.Manifests, head)
    finally:
        connection.close()
    # One sync for all of them (10 000 initdata files at 10 000 workloads), each file atomic;
    # verify/'s head is written after them: it says up to where verify/ holds every manifest.
    files = [(ROOT_CA, history.RootCA), (MESH_CA, history.MeshCA)]
    files += [
        (f"manifest.{index}.json", document)
        for index, document in enumerate(history.Manifests, start=first)
    ]
    files += [(f"initdata.{digest(policy).hex()}.toml", policy) for policy in history.Policies]
    output.write_all_public(files)
    record(output, LastSeen(output.path(LATEST_TRANSITION), None), chain)
    record(workspace, seen, chain)
    active = history.Manifests[-1] if history.Manifests else b""
    count = first + len(history.Manifests)
    if active != manifest_bytes:
        raise OperationFailed(
            f"the Coordinator's active manifest differs from {target.manifest_path}",
            hint=f"compare with {directory}/manifest.{count - 1}.json",
        )
    warnings = tuple(debug_warnings(manifest, history.Policies))
    return VerifyResult(directory, count, matches=True, seen=seen, debug_warnings=warnings)


def debug_warnings(manifest: Manifest, documents: Iterable[bytes]) -> list[str]:
    """One line per policy of `manifest` whose initdata among `documents` opens the insecure
    debug shell, in the order of the documents' names in `verify/`.

    The flag is in the document the policy hash covers, so a debug-enabled pod cannot pass as
    another. `verify` passes the active manifest (byte for byte the local one, which it checked)
    and the documents GetManifests sent, as they are in memory: each is parsed once (reading
    every initdata file in `verify/` back parsed it twice, and any older manifest's too).
    """
    warnings = []
    for toml in sorted(documents, key=digest):
        try:
            initdata = Initdata.from_toml(toml)
        except InitdataError as error:
            warnings.append(f"policy initdata.{digest(toml).hex()}.toml cannot be read: {error}")
            continue
        if not initdata.insecure_debug:
            continue
        hashed = initdata.policy_hash_of(toml)
        entry = manifest.policies.get(hashed.hex())
        if entry is None:
            continue
        name = entry.workload_secret_id or ", ".join(entry.sans)
        warnings.append(
            f"INSECURE: policy {hashed.hex()[:16]}… ({name}) enables the debug shell: whoever can"
            " exec into that pod has a shell in its confidential VM"
        )
    return warnings


def _verified_until(output: Workspace, seen: LastSeen) -> bytes:
    """Where verify may start: the head up to which `verify/` holds every manifest (it wrote
    them with that head), when the workspace remembers a head to check rollback against;
    otherwise nothing, and the whole history is fetched."""
    if seen.transition_hash is None:
        return b""
    try:
        verified = last_seen(output)
    except WorkspaceError:
        return b""
    return verified.transition_hash or b""


def recover(
    target: Target,
    workspace: Workspace,
    *,
    seedshare_owner_key: Path | Sequence[Path],
    seed_shares: Path,
    shares: Sequence[Path] = (),
) -> LastSeen:
    """Attest the restarted Coordinator and hand it the seed from our seed share(s).

    With a `SeedshareThreshold` K > 1 in the manifest, the seed comes from K owners' shares:
    each given owner key opens its own share in `seed_shares`, each file in `shares` holds a
    share another owner opened (`decrypt_share`), and the seed is recombined here.

    Returns what the workspace remembered: the Coordinator refuses to recover a history without
    that transition, and without it rollback could not be checked.
    """
    manifest, _ = load_manifest(target.manifest_path)
    keys = [seedshare_owner_key] if isinstance(seedshare_owner_key, Path) else seedshare_owner_key
    document = read_seed_shares(seed_shares)
    if manifest.seedshare_threshold == 1:
        if shares:
            raise OperationFailed(
                "the manifest's SeedshareThreshold is 1: one seed share owner key recovers alone",
                hint="pass --seedshare-owner-key, not --share",
            )
        seed = document.decrypt(load_seedshare_owner_key(keys[0]))
    else:
        given = [read_share(path) for path in shares]  # every file read before any key is used
        mnemonics = [threshold.unpack(document.decrypt(load_seedshare_owner_key(k))) for k in keys]
        mnemonics += given
        if len(set(mnemonics)) < manifest.seedshare_threshold:
            raise OperationFailed(
                f"the manifest's SeedshareThreshold is {manifest.seedshare_threshold}:"
                f" {len(set(mnemonics))} different seed shares are not enough",
                hint="pass one --seedshare-owner-key or --share per owner taking part",
            )
        seed = threshold.combine(mnemonics)
    seen = last_seen(workspace)
    connection = _connect(target, manifest)
    try:
        client = UserApiClient(connection.channel, timeout=target.timeout)
        request = userapi_pb2.RecoverRequest(
            Seed=seed, Salt=document.salt, ExpectedTransitionHash=seen.transition_hash or b""
        )
        _call("Recover", lambda: client.recover(request))
        # Only what followed the head this workspace saw (the whole history without one): the
        # whole history grows with every update (1000 updates on ConfigMaps: past the deadline).
        # No policy documents: the rollback and chain checks read only the manifests and the
        # head, as set's, and the documents are ~545 MB at 10 000 real-size workloads.
        since = seen.transition_hash or b""
        history = _call(
            "GetManifests", lambda: client.get_manifests(since=since, without_policies=True)
        )
    finally:
        connection.close()
    chain = check_history(
        seen, history.Manifests, history.LatestTransition.TransitionHash, start=_start(history)
    )
    workspace.write_public(ROOT_CA, history.RootCA)
    workspace.write_public(MESH_CA, history.MeshCA)
    record(workspace, seen, chain)
    return seen
